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
process.
"""

from __future__ import annotations

import errno
import os
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

from . import _libnuma, _proc, _threads
from .errors import (
    BindError,
    LibnumaUnavailableError,
    PlanError,
    PynumabindError,
    format_ids,
)
from .model import MemoryPolicy, Plan

__all__ = [
    "CpuUndo",
    "Journal",
    "MigrationOutcome",
    "PolicyRequest",
    "PolicyUndo",
    "Skipped",
    "ThreadChurn",
    "allowed_mems_for",
    "bind_cpus",
    "cpu_error",
    "fix_for",
    "migrate_pages",
    "policy_request",
    "read_back_policy",
    "set_policy",
    "threads_keeping_policy",
]

_SECCOMP_FIX = (
    "EPERM from a memory-policy syscall usually means a container seccomp profile: Docker's "
    "default profile allows set_mempolicy, get_mempolicy and mbind only to containers with "
    "CAP_SYS_NICE; fix: run the container with '--cap-add SYS_NICE' (Kubernetes: "
    "securityContext.capabilities.add: [SYS_NICE]) or with a seccomp profile that allows "
    "set_mempolicy, get_mempolicy, mbind, migrate_pages and move_pages"
)
_SECCOMP_MIGRATE_FIX = (
    "EPERM from migrate_pages usually means a container seccomp profile (Docker's default "
    "profile denies migrate_pages and move_pages even with CAP_SYS_NICE); fix: use a seccomp "
    "profile that allows them, or bind before allocating so nothing needs moving"
)


@dataclass(frozen=True)
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


@dataclass(eq=False)
class CpuUndo:
    """Thread masks to put back.

    ``masks`` (tid -> mask before) is filled by :func:`._threads.bind_threads`
    before each change.  Threads not in it that were alive before the bind
    (``existing``) were on the bound CPUs already and stay so; any other
    thread found on ``bound`` was started after the bind, inherited the
    bound CPUs, and goes back to ``reference`` (the caller's mask before).
    """

    reference: frozenset[int]
    bound: frozenset[int]
    existing: frozenset[int] = frozenset()
    masks: Dict[int, frozenset[int]] = field(default_factory=dict)

    def undo(self) -> List[str]:
        masks = dict(self.masks)
        failures: List[str] = []
        try:
            for tid in _proc.list_thread_ids():
                if tid in masks or tid in self.existing:
                    continue  # changed by the bind, or on these CPUs before it
                if _proc.thread_affinity(tid) == self.bound:
                    masks[tid] = self.reference
        except PynumabindError as exc:
            failures.append(f"thread scan: {exc}")
        _, failed = _threads.restore_threads(masks)
        failures.extend(f"thread {tid} affinity" for tid in failed)
        return failures


@dataclass(eq=False)
class PolicyUndo:
    """The calling thread's memory policy before (``None``: unreadable, so default)."""

    before: Optional[_libnuma.MemPolicy]

    def undo(self) -> List[str]:
        try:
            if self.before is None:  # could not be read: default is the usual state
                _libnuma.set_mempolicy(_libnuma.MPOL_DEFAULT)
            else:
                _libnuma.set_mempolicy(self.before.mode, self.before.nodes, self.before.flags)
        except _libnuma.ERRORS as exc:
            return [f"memory policy: {exc}"]
        return []


UndoRecord = Union[CpuUndo, PolicyUndo]


class Journal:
    """Undo records of one bind, newest last; the one mutable part of a Binding.

    Journals still in force are kept (weakly, in bind order) in a
    per-process stack, which defines what restoring one means:

    * Restores go in the reverse order of the binds.  A binding is refused
      (:class:`BindError`, nothing changed) while a newer one that changed
      the same things is still in force -- CPU masks, which are
      process-wide, or the memory policy of the same thread.  Unrelated
      bindings (say, two threads each setting only its own policy) restore
      in any order.
    * A journal belongs to the process and thread that made it: in a forked
      child its thread ids name the parent's threads, so restoring there is
      refused; the memory policy can only be put back by its own thread.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.thread_id = threading.get_native_id()
        self.records: List[UndoRecord] = []
        self.restored = False
        self.lock = threading.Lock()
        _forget(None)  # drop the journals of bindings nobody holds any more
        _IN_FORCE.append(weakref.ref(self))

    def add(self, record: UndoRecord) -> None:
        """Record an undo *before* making the change it undoes."""
        self.records.append(record)

    def discard(self, record: UndoRecord) -> None:
        """Forget a record whose change is known not to have happened."""
        if record in self.records:
            self.records.remove(record)

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
            failures.extend(self.records[-1].undo())
            self.records.pop()
        _forget(self)
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
        newer = _newer_overlapping(self)
        if newer is not None:
            raise BindError(
                f"a newer binding (made on thread {newer.thread_id}) changed the same "
                f"{'CPU affinity' if self.owns_cpus and newer.owns_cpus else 'memory policy'} "
                "and is still in force; restore it first (restores go in the reverse order "
                "of the binds); nothing was changed"
            )


_IN_FORCE: List[weakref.ref[Journal]] = []  # journals of this process, in bind order


def _forget(journal: Optional[Journal]) -> None:
    """Drop ``journal`` and every journal already garbage-collected from the stack."""
    for ref in list(_IN_FORCE):
        if ref() is journal or ref() is None:
            _IN_FORCE.remove(ref)


def _newer_overlapping(journal: Journal) -> Optional[Journal]:
    """The newest journal made after ``journal`` that changed the same things."""
    found: Optional[Journal] = None
    seen = False
    for ref in list(_IN_FORCE):
        other = ref()
        if other is journal:
            seen = True
        elif seen and other is not None and other.records and other.pid == journal.pid:
            cpus = journal.owns_cpus and other.owns_cpus
            policy = journal.owns_policy and other.owns_policy
            if cpus or (policy and other.thread_id == journal.thread_id):
                found = other
    return found


# -------------------------------------------------------------------- steps


@dataclass(frozen=True)
class PolicyRequest:
    """The ``MPOL_*`` mode and nodes for a plan (``mode`` None: leave it)."""

    mode: Optional[int]
    nodes: frozenset[int]
    note: Optional[str] = None


def policy_request(plan: Plan) -> PolicyRequest:
    """The MPOL mode and nodes for ``plan``, and a note when they differ from it."""
    policy = plan.policy
    mems = plan.mems
    if policy is MemoryPolicy.NONE:
        return PolicyRequest(None, frozenset())
    if policy is MemoryPolicy.LOCAL:
        return PolicyRequest(_libnuma.MPOL_LOCAL, frozenset())
    if not mems:
        raise PlanError(
            f"plan for rank {plan.rank} asks for memory policy {policy.value} "
            "but names no memory nodes"
        )
    if policy is MemoryPolicy.BIND:
        return PolicyRequest(_libnuma.MPOL_BIND, mems)
    if policy is MemoryPolicy.INTERLEAVE:
        return PolicyRequest(_libnuma.MPOL_INTERLEAVE, mems)
    if len(mems) == 1:
        return PolicyRequest(_libnuma.MPOL_PREFERRED, mems)
    many = _libnuma.supports_mode(_libnuma.MPOL_PREFERRED_MANY)
    if many:
        return PolicyRequest(_libnuma.MPOL_PREFERRED_MANY, mems)
    first = min(mems)
    why = "this kernel lacks it (Linux < 5.15)" if many is False else "it could not be probed"
    note = (
        f"preferred on nodes {format_ids(mems)} needs MPOL_PREFERRED_MANY and {why}; "
        f"preferring node {first} only"
    )
    return PolicyRequest(_libnuma.MPOL_PREFERRED, frozenset({first}), note)


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
        # ones started from here on that inherit it are not.
        record = CpuUndo(before, wanted, frozenset(_proc.list_thread_ids()))
        journal.add(record)
        scan = _threads.bind_threads(wanted, reference=before, record=record.masks)
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
        before: Optional[_libnuma.MemPolicy] = _libnuma.get_mempolicy()
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


@dataclass(frozen=True)
class MigrationOutcome:
    """Step 3's outcome: pages the kernel could not move, or why it did not run."""

    migrated: bool = False
    pages_not_moved: Optional[int] = None
    failure: Optional[Exception] = None
    note: Optional[str] = None


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
) -> Tuple[Optional[_libnuma.MemPolicy], Optional[str]]:
    """The calling thread's policy now, and a note when it is not what was set."""
    try:
        now = _libnuma.get_mempolicy()
    except _libnuma.ERRORS as exc:
        return None, f"memory policy could not be read back: {exc}"
    if applied and (now.mode != request.mode or (request.nodes and now.nodes != request.nodes)):
        return now, (
            f"memory policy reads back as {now.mode_name} on {format_ids(now.nodes)}, "
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
    effective CPUs when known (see :func:`._proc.cpuset`).
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
