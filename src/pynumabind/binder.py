"""Apply a :class:`~pynumabind.model.Plan` to the running process.

This is the imperative shell around the pure planner: it changes kernel
state, reads it back, and can undo it.  Three rules shape it:

* **All threads, not just the caller.**  CPU affinity is set on every thread
  that is not deliberately pinned elsewhere (see :mod:`._threads`), so
  thread pools started before the bind move too.  A memory policy, however,
  can only be set on the calling thread (no syscall changes another
  thread's policy); threads it starts later inherit it, and the
  :class:`Binding` lists the existing threads that keep their own.
* **Never half-bound.**  Any failure on the CPU side rolls back what was
  already changed and raises :class:`~pynumabind.errors.BindError`.  A denied
  memory policy (EPERM under Docker's default seccomp profile) either keeps
  the CPU binding and logs one WARNING that says how to fix it
  (``on_error="warn"``, the default: a worker that runs is better than a
  worker that dies), or rolls everything back and raises
  (``on_error="raise"``).
* **Raw syscalls only.**  libnuma's void setters report errors by printing;
  here every policy change goes through ``set_mempolicy`` and friends, whose
  errno becomes a typed error.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
import time
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from . import _libnuma, _threads
from .errors import (
    BindError,
    ConfigError,
    LibnumaUnavailableError,
    NumaSyscallError,
    PlanError,
    format_ids,
)
from .model import CpuMode, MemoryPolicy, Plan

if TYPE_CHECKING:  # pragma: no cover
    from . import _environ
    from .model import Topology

__all__ = [
    "ON_ERROR_CHOICES",
    "Binding",
    "Skipped",
    "VerifyResult",
    "apply_plan",
    "bind_current_process",
]

log = logging.getLogger(__name__)

ON_ERROR_CHOICES: Tuple[str, ...] = ("warn", "raise")

VERIFY_PAGES = 16
# Below this much free memory on a preferred node, spilling elsewhere is the
# policy working as designed, not a binding problem.
_PREFERRED_SPILL_BYTES = 256 << 20
# move_pages reports a page the kernel is migrating at that instant (compaction,
# NUMA balancing) as -ENOENT, as if it were not there; seen in the QEMU guest
# tests.  verify() asks again this many times, this far apart, before it
# reports a test page as missing.
_SETTLE_TRIES = 5
_SETTLE_PAUSE = 0.05  # seconds

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


# ------------------------------------------------------------------ values


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


@dataclass(frozen=True)
class VerifyResult:
    """What :meth:`Binding.verify` found.

    ``ok`` is True when everything the binding claims to be in force is:
    each bound thread's affinity, the calling thread's policy, and where
    freshly touched pages landed.  ``problems`` explain each mismatch;
    ``notes`` say what could not be checked and why (not failures).
    ``page_nodes`` is the node of each test page (negative: ``-errno``).
    """

    ok: bool
    problems: Tuple[str, ...] = ()
    notes: Tuple[str, ...] = ()
    page_nodes: Tuple[int, ...] = ()
    threads_checked: int = 0
    memory_checked: bool = False

    def to_dict(self) -> Dict[str, Any]:
        return {
            "ok": self.ok,
            "problems": list(self.problems),
            "notes": list(self.notes),
            "page_nodes": list(self.page_nodes),
            "threads_checked": self.threads_checked,
            "memory_checked": self.memory_checked,
        }


class _UndoState:
    """What :meth:`Binding.restore` needs; the one mutable part of a Binding."""

    def __init__(
        self,
        masks: Dict[int, frozenset[int]],
        reference: Optional[frozenset[int]],
        bound_cpus: Optional[frozenset[int]],
        policy_before: Optional[_libnuma.MemPolicy],
        policy_changed: bool,
        *,
        existing: frozenset[int] = frozenset(),
    ) -> None:
        self.masks = masks
        self.existing = existing  # threads alive before the bind started
        self.reference = reference
        self.bound_cpus = bound_cpus
        self.policy_before = policy_before
        self.policy_changed = policy_changed
        self.restored = False
        self.lock = threading.Lock()


@dataclass(frozen=True, eq=False)
class Binding:
    """The outcome of applying a plan, read back from the kernel.

    * ``plan``: what was asked (``None`` when binding was disabled).
    * ``applied``: whether anything was changed (CPUs, policy or pages).
    * ``threads``: per-thread affinity results (tid, name, before, after,
      action); empty when the plan leaves CPUs alone.
    * ``cpus``: the calling thread's affinity now.
    * ``policy_mode``/``policy_nodes``: the ``MPOL_*`` mode and nodes
      requested (``None``: memory policy untouched); ``mempolicy``: the
      calling thread's policy read back with ``get_mempolicy`` (``None`` when
      it could not be read).
    * ``threads_keeping_policy``: other threads that existed at bind time and
      keep their previous memory policy.
    * ``partial``: something in ``skipped`` was not applied.
    * ``pages_not_moved``: with ``migrate=True``, the kernel's count of pages
      it could not move (``None`` when no migration ran).
    * ``thread_id``: the thread that bound; the memory policy is its own.
    """

    plan: Optional[Plan]
    applied: bool
    disabled: bool = False
    threads: Tuple[_threads.ThreadResult, ...] = ()
    threads_converged: bool = True
    cpus: Optional[frozenset[int]] = None
    policy_mode: Optional[int] = None
    policy_nodes: frozenset[int] = frozenset()
    mempolicy: Optional[_libnuma.MemPolicy] = None
    memory_applied: bool = False
    threads_keeping_policy: Tuple[int, ...] = ()
    partial: bool = False
    skipped: Tuple[Skipped, ...] = ()
    migrated: bool = False
    pages_not_moved: Optional[int] = None
    notes: Tuple[str, ...] = ()
    thread_id: int = 0
    _undo: Optional[_UndoState] = field(default=None, repr=False, compare=False)

    # ------------------------------------------------------------ queries

    @property
    def policy_name(self) -> Optional[str]:
        if self.policy_mode is None:
            return None
        return _libnuma.MODE_NAMES.get(self.policy_mode, f"mode {self.policy_mode}")

    @property
    def threads_bound(self) -> Tuple[int, ...]:
        return tuple(t.tid for t in self.threads if t.action is _threads.ThreadAction.BOUND)

    @property
    def threads_left_pinned(self) -> Tuple[int, ...]:
        return tuple(t.tid for t in self.threads if t.action is _threads.ThreadAction.LEFT_PINNED)

    @property
    def restored(self) -> bool:
        return self._undo is not None and self._undo.restored

    def summary(self) -> str:
        """The one-line description logged at INFO."""
        if self.disabled or self.plan is None:
            return "pynumabind: binding disabled; nothing applied" + (
                f" ({self.notes[0]})" if self.notes else ""
            )
        plan = self.plan
        device = "none"
        if plan.device is not None:
            device = f"GPU {plan.device.index} ({plan.device.pci_bus_id})"
        cpus = "unchanged" if plan.cpus is None else format_ids(self.cpus)
        if self.memory_applied:
            memory = f"nodes {format_ids(self.policy_nodes)} policy {self.policy_name}"
        elif plan.policy is MemoryPolicy.NONE:
            memory = "unchanged"
        else:
            memory = f"NOT APPLIED (wanted {plan.policy.value} on {format_ids(plan.mems)})"
        text = f"pynumabind: rank {plan.rank} device {device} CPUs {cpus} memory {memory}"
        if plan.cpus is not None:
            text += f" threads {len(self.threads_bound)} bound"
            if self.threads_left_pinned:
                text += f", {len(self.threads_left_pinned)} left pinned"
        if self.pages_not_moved is not None:
            text += f" pages not moved {self.pages_not_moved}"
        if self.partial:
            text += " (partial)"
        return text

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form (for ``pynumabind bind --json`` and reports)."""
        policy = None
        if self.mempolicy is not None:
            policy = {
                "mode": self.mempolicy.mode_name,
                "nodes": format_ids(self.mempolicy.nodes),
                "flags": self.mempolicy.flags,
            }
        return {
            "plan": None if self.plan is None else self.plan.to_dict(),
            "applied": self.applied,
            "disabled": self.disabled,
            "partial": self.partial,
            "cpus": None if self.cpus is None else format_ids(self.cpus),
            "threads": [t.to_dict() for t in self.threads],
            "threads_converged": self.threads_converged,
            "policy_requested": self.policy_name,
            "policy_nodes": format_ids(self.policy_nodes),
            "memory_applied": self.memory_applied,
            "mempolicy": policy,
            "threads_keeping_policy": list(self.threads_keeping_policy),
            "skipped": [s.to_dict() for s in self.skipped],
            "migrated": self.migrated,
            "pages_not_moved": self.pages_not_moved,
            "notes": list(self.notes),
            "thread_id": self.thread_id,
            "restored": self.restored,
        }

    # ------------------------------------------------------------- verify

    def verify(self, pages: int = VERIFY_PAGES) -> VerifyResult:
        """Check that the binding is in force; never raises on a mismatch.

        Reads each bound thread's affinity, reads the policy back and touches
        ``pages`` fresh anonymous pages to see (``move_pages``) where the
        kernel put them.  Memory is checked only when called from the
        binding thread, whose policy it is.
        """
        problems: List[str] = []
        notes: List[str] = []
        if self.plan is None or not self.applied:
            notes.append("nothing was applied; nothing to verify")
            return VerifyResult(True, (), tuple(notes))
        if self.restored:
            notes.append("binding was restored; checked against the plan anyway")
        plan = self.plan
        threads_checked = 0
        if plan.cpus is not None:
            for result in self.threads:
                if result.action is not _threads.ThreadAction.BOUND:
                    continue
                try:
                    now = _threads.thread_affinity(result.tid)
                except OSError as exc:
                    problems.append(f"cannot read thread {result.tid}'s affinity: {exc}")
                    continue
                if now is None:
                    continue  # exited since
                threads_checked += 1
                if now != plan.cpus:
                    problems.append(
                        f"thread {result.tid} ({result.name}) runs on CPUs {format_ids(now)}, "
                        f"expected {format_ids(plan.cpus)}"
                    )
        found_nodes: Tuple[int, ...] = ()
        memory_checked = False
        if self.memory_applied and self.policy_mode is not None:
            if threading.get_native_id() != self.thread_id:
                notes.append(
                    f"memory not checked: the policy belongs to thread {self.thread_id}, "
                    "verify() was called from another thread"
                )
            else:
                found_nodes, memory_checked = _verify_memory(
                    self.policy_mode, self.policy_nodes, pages, problems, notes
                )
        elif plan.policy is not MemoryPolicy.NONE:
            notes.append("memory policy was not applied (see Binding.skipped); not checked")
        return VerifyResult(
            ok=not problems,
            problems=tuple(problems),
            notes=tuple(notes),
            page_nodes=found_nodes,
            threads_checked=threads_checked,
            memory_checked=memory_checked,
        )

    # ------------------------------------------------------------ restore

    def restore(self) -> None:
        """Undo the binding: thread masks and the memory policy as they were.

        Threads started after the bind that inherited the bound CPUs go back
        to the caller's previous mask too.  Must run on the binding thread
        when a memory policy was applied (it is that thread's).  Idempotent.
        Raises :class:`BindError` if something could not be put back.
        """
        undo = self._undo
        if undo is None:
            return
        with undo.lock:
            if undo.restored:
                return
            if undo.policy_changed and threading.get_native_id() != self.thread_id:
                raise BindError(
                    f"restore() must run on thread {self.thread_id}, which bound the memory "
                    f"policy (called from thread {threading.get_native_id()})"
                )
            failures = _undo_all(undo)
            undo.restored = True
        if failures:
            raise BindError("could not fully restore the binding: " + "; ".join(failures))
        log.debug("pynumabind: binding restored")

    def __enter__(self) -> Binding:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.restore()


# ------------------------------------------------------------------ apply


def _check_on_error(on_error: str) -> None:
    if on_error not in ON_ERROR_CHOICES:
        raise ConfigError(
            f"invalid on_error {on_error!r}; choose one of: {', '.join(ON_ERROR_CHOICES)}"
        )


def _policy_request(plan: Plan) -> Tuple[Optional[int], frozenset[int], Optional[str]]:
    """The MPOL mode and nodes for ``plan``, and a note when they differ from it."""
    policy = plan.policy
    mems = plan.mems
    if policy is MemoryPolicy.NONE:
        return None, frozenset(), None
    if policy is MemoryPolicy.LOCAL:
        return _libnuma.MPOL_LOCAL, frozenset(), None
    if not mems:
        raise PlanError(
            f"plan for rank {plan.rank} asks for memory policy {policy.value} "
            "but names no memory nodes"
        )
    if policy is MemoryPolicy.BIND:
        return _libnuma.MPOL_BIND, mems, None
    if policy is MemoryPolicy.INTERLEAVE:
        return _libnuma.MPOL_INTERLEAVE, mems, None
    if len(mems) == 1:
        return _libnuma.MPOL_PREFERRED, mems, None
    many = _libnuma.supports_mode(_libnuma.MPOL_PREFERRED_MANY)
    if many:
        return _libnuma.MPOL_PREFERRED_MANY, mems, None
    first = min(mems)
    why = "this kernel lacks it (Linux < 5.15)" if many is False else "it could not be probed"
    note = (
        f"preferred on nodes {format_ids(mems)} needs MPOL_PREFERRED_MANY and {why}; "
        f"preferring node {first} only"
    )
    return _libnuma.MPOL_PREFERRED, frozenset({first}), note


def _fix_for(exc: BaseException, what: str) -> str:
    err = getattr(exc, "errno", None)
    if isinstance(exc, LibnumaUnavailableError):
        return "install the libnuma runtime package (see the error)"
    if err == errno.EPERM:
        return _SECCOMP_MIGRATE_FIX if what == "page migration" else _SECCOMP_FIX
    if err == errno.ENOSYS:
        return "the kernel lacks NUMA support (CONFIG_NUMA) or a filter returns ENOSYS"
    if err == errno.EINVAL:
        try:
            allowed = format_ids(_libnuma.get_mems_allowed())
        except (NumaSyscallError, LibnumaUnavailableError):
            allowed = "unknown"
        return (
            f"the {what} names nodes outside this process's allowed memory nodes "
            f"({allowed}, its cpuset.mems); plan within them"
        )
    return "see the error"


def _allowed_description(current: frozenset[int]) -> str:
    """Where the CPU restriction comes from, for error messages."""
    cpuset = _cpuset_cpus()
    parts = [f"affinity mask {format_ids(current)}"]
    if cpuset is not None:
        path, cpus = cpuset
        parts.insert(0, f"cpuset {path} allows {format_ids(cpus)}")
    return "; ".join(parts)


def _cpuset_cpus() -> Optional[Tuple[str, frozenset[int]]]:
    """This process's cpuset and its effective CPUs, best effort (v1 or v2)."""
    from .cpulist import parse_cpulist

    try:
        with open("/proc/self/cpuset", encoding="utf-8") as handle:
            path = handle.read().strip()
    except OSError:
        return None
    candidates = (
        f"/sys/fs/cgroup/cpuset{path}/cpuset.effective_cpus",  # v1
        f"/sys/fs/cgroup{path}/cpuset.cpus.effective",  # v2
    )
    for candidate in candidates:
        try:
            with open(candidate, encoding="utf-8") as handle:
                return path, parse_cpulist(handle.read().strip())
        except (OSError, ValueError):
            continue
    return None


def _cpu_error(wanted: frozenset[int], before: frozenset[int], detail: str) -> BindError:
    return BindError(
        f"cannot bind to CPUs {format_ids(wanted)}: {detail}; this process may use "
        f"CPUs {format_ids(before)} ({_allowed_description(before)}); nothing was changed. "
        "Plan within the allowed CPUs (pynumabind plans within them when it detects the "
        "topology itself) or widen the cpuset/affinity the launcher gives this worker"
    )


def _undo_all(undo: _UndoState) -> List[str]:
    """Put back memory policy then thread masks; return what failed."""
    failures: List[str] = []
    if undo.policy_changed:
        before = undo.policy_before
        try:
            if before is None:  # could not be read: default is the usual state
                _libnuma.set_mempolicy(_libnuma.MPOL_DEFAULT)
            else:
                _libnuma.set_mempolicy(before.mode, before.nodes, before.flags)
        except (NumaSyscallError, LibnumaUnavailableError) as exc:
            failures.append(f"memory policy: {exc}")
    masks = dict(undo.masks)
    if undo.bound_cpus is not None and undo.reference is not None:
        # Threads started after the bind inherited the bound CPUs.
        try:
            for tid in _threads.list_thread_ids():
                if tid in masks or tid in undo.existing:
                    continue  # changed by the bind, or on these CPUs before it
                if _threads.thread_affinity(tid) == undo.bound_cpus:
                    masks[tid] = undo.reference
        except OSError as exc:
            failures.append(f"thread scan: {exc}")
    _, failed = _threads.restore_threads(masks)
    failures.extend(f"thread {tid} affinity" for tid in failed)
    return failures


def apply_plan(plan: Plan, *, migrate: bool = False, on_error: str = "warn") -> Binding:
    """Apply ``plan`` to this process and read the result back.

    CPU affinity goes to every thread not pinned elsewhere; the memory
    policy to the calling thread (inherited by threads it starts later).
    ``migrate=True`` also moves pages already allocated onto the plan's
    nodes.  See the module docstring for ``on_error``.
    """
    _check_on_error(on_error)
    if plan.cpus is not None and not plan.cpus:
        raise PlanError(f"plan for rank {plan.rank} has an empty CPU set")
    mode, nodes, policy_note = _policy_request(plan)
    notes: List[str] = [policy_note] if policy_note else []
    skipped: List[Skipped] = []
    caller = threading.get_native_id()
    before = frozenset(os.sched_getaffinity(0))

    # ---- CPUs: all or nothing.
    scan: Optional[_threads.ThreadScan] = None
    existing: frozenset[int] = frozenset()
    if plan.cpus is not None:
        wanted = plan.cpus
        if not wanted <= before:
            raise _cpu_error(
                wanted, before, f"CPUs {format_ids(wanted - before)} are not allowed here"
            )
        try:
            # Threads on exactly ``wanted`` already are left so by restore();
            # ones started from here on that inherit it are not.
            existing = frozenset(_threads.list_thread_ids())
            scan = _threads.bind_threads(wanted, reference=before)
        except _threads.ThreadAffinityError as exc:
            reason = "the kernel refused" + (
                " (EINVAL: none of them is in this process's cpuset)"
                if exc.errno == errno.EINVAL
                else f" ({errno.errorcode.get(exc.errno or 0, exc.errno)})"
            )
            error = _cpu_error(wanted, before, reason)
            if exc.restore_failures:
                error = BindError(
                    f"{error}; WARNING: threads {list(exc.restore_failures)} could not be restored"
                )
            raise error from exc
        except OSError as exc:  # /proc/self/task unreadable; bind_threads rolled back
            raise _cpu_error(wanted, before, f"cannot read this process's threads ({exc})") from exc
        narrowed = [
            r for r in scan.results if r.action is _threads.ThreadAction.BOUND and r.after != wanted
        ]
        if narrowed:
            _threads.restore_threads(scan.changed())
            got = narrowed[0].after or frozenset()
            raise _cpu_error(
                wanted, before, f"the kernel narrowed thread {narrowed[0].tid} to {format_ids(got)}"
            )
        if not scan.converged:
            notes.append(
                f"threads kept appearing after {scan.passes} scans; late ones inherit the "
                "bound CPUs only if a bound thread started them"
            )

    undo = _UndoState(
        masks=scan.changed() if scan is not None else {},
        reference=before if scan is not None else None,
        bound_cpus=plan.cpus,
        policy_before=None,
        policy_changed=False,
        existing=existing,
    )

    def fail(what: str, exc: BaseException) -> None:
        """Record a skipped part, or roll back and raise (on_error="raise")."""
        if on_error == "raise":
            failures = _undo_all(undo)
            extra = f"; could not roll back: {'; '.join(failures)}" if failures else ""
            raise BindError(
                f"{what} failed: {exc}; {_fix_for(exc, what)}; rolled back{extra}"
            ) from exc
        skipped.append(Skipped(what, str(exc), _fix_for(exc, what), getattr(exc, "errno", None)))

    memory_applied = False
    pages_not_moved: Optional[int] = None
    migrated = False
    try:
        # ---- memory policy: the calling thread's.
        if mode is not None:
            try:
                undo.policy_before = _libnuma.get_mempolicy()
            except (NumaSyscallError, LibnumaUnavailableError):
                undo.policy_before = None
            try:
                _libnuma.set_mempolicy(mode, nodes)
            except (NumaSyscallError, LibnumaUnavailableError) as exc:
                fail("memory policy", exc)
            else:
                undo.policy_changed = True
                memory_applied = True
        # ---- migration of pages already allocated.
        if migrate:
            if not plan.mems:
                notes.append(f"migrate ignored: policy {plan.policy.value} names no nodes")
            else:
                try:
                    allowed = _libnuma.get_mems_allowed()
                    source = (allowed - plan.mems) or allowed
                    pages_not_moved = _libnuma.migrate_pages(0, source, plan.mems)
                    migrated = True
                except (NumaSyscallError, LibnumaUnavailableError) as exc:
                    fail("page migration", exc)
    except BindError:
        raise
    except BaseException:
        _undo_all(undo)  # never leave the process half-bound
        raise

    threads_keeping: Tuple[int, ...] = ()
    if memory_applied:
        if scan is not None:  # the scan just listed every thread
            threads_keeping = tuple(
                r.tid
                for r in scan.results
                if r.tid != caller and r.action is not _threads.ThreadAction.EXITED
            )
        else:
            try:
                threads_keeping = tuple(t for t in _threads.list_thread_ids() if t != caller)
            except OSError:
                threads_keeping = ()
    if threads_keeping:
        notes.append(
            f"{len(threads_keeping)} thread(s) that already existed keep their memory policy "
            "(only the calling thread's can be set; threads it starts inherit it)"
        )
    try:
        readback: Optional[_libnuma.MemPolicy] = _libnuma.get_mempolicy()
    except (NumaSyscallError, LibnumaUnavailableError) as exc:
        readback = None
        notes.append(f"memory policy could not be read back: {exc}")
    if (
        memory_applied
        and readback is not None
        and (readback.mode != mode or (nodes and readback.nodes != nodes))
    ):
        notes.append(
            f"memory policy reads back as {readback.mode_name} on {format_ids(readback.nodes)}, "
            f"requested {_libnuma.MODE_NAMES.get(mode or 0)} on {format_ids(nodes)}"
        )

    binding = Binding(
        plan=plan,
        applied=scan is not None or memory_applied or migrated,
        threads=scan.results if scan is not None else (),
        threads_converged=scan.converged if scan is not None else True,
        cpus=_caller_cpus(scan, caller, before),
        policy_mode=mode,
        policy_nodes=nodes,
        mempolicy=readback,
        memory_applied=memory_applied,
        threads_keeping_policy=threads_keeping,
        partial=bool(skipped),
        skipped=tuple(skipped),
        migrated=migrated,
        pages_not_moved=pages_not_moved,
        notes=tuple(notes),
        thread_id=caller,
        _undo=undo,
    )
    if skipped:
        log.warning(
            "pynumabind: rank %d bound only partly; %s",
            plan.rank,
            "; ".join(str(s) for s in skipped)
            + ("; CPU affinity was applied" if plan.cpus is not None else ""),
        )
    if log.isEnabledFor(logging.INFO):
        log.info("%s", binding.summary())
    return binding


def _caller_cpus(
    scan: Optional[_threads.ThreadScan], caller: int, before: frozenset[int]
) -> frozenset[int]:
    """The caller's mask now: read back by the scan, or unchanged."""
    if scan is not None:
        for result in scan.results:
            if result.tid == caller and result.after is not None:
                return result.after
    return before


# ------------------------------------------------------------------ verify


def _verify_memory(
    mode: int,
    nodes: frozenset[int],
    pages: int,
    problems: List[str],
    notes: List[str],
) -> Tuple[Tuple[int, ...], bool]:
    """Check the calling thread's policy and where new pages land."""
    try:
        now = _libnuma.get_mempolicy()
    except (NumaSyscallError, LibnumaUnavailableError) as exc:
        notes.append(f"memory policy not readable: {exc}")
        return (), False
    wanted_name = _libnuma.MODE_NAMES.get(mode, str(mode))
    if now.mode != mode or (nodes and now.nodes != nodes):
        problems.append(
            f"memory policy is {now.mode_name} on nodes {format_ids(now.nodes)}, "
            f"expected {wanted_name} on {format_ids(nodes)}"
        )
    size = mmap.PAGESIZE
    scratch = mmap.mmap(-1, max(pages, 1) * size)
    try:
        for index in range(max(pages, 1)):
            scratch[index * size] = 1  # fault the page in under the current policy
        try:
            found = tuple(_libnuma.page_nodes(scratch))
            for _ in range(_SETTLE_TRIES - 1):
                if min(found, default=0) >= 0:
                    break
                time.sleep(_SETTLE_PAUSE)
                found = tuple(_libnuma.page_nodes(scratch))
        except (NumaSyscallError, LibnumaUnavailableError) as exc:
            notes.append(f"page placement not checked: {exc}")
            return (), False
    finally:
        scratch.close()
    missing = [i for i, node in enumerate(found) if node < 0]
    if missing:
        problems.append(f"test pages {missing} not present after touching them")
    placed = [node for node in found if node >= 0]
    outside = sorted({node for node in placed if node not in nodes})
    if mode == _libnuma.MPOL_BIND and outside:
        problems.append(
            f"pages landed on nodes {format_ids(frozenset(outside))} outside the bound nodes "
            f"{format_ids(nodes)}"
        )
    elif mode in (_libnuma.MPOL_PREFERRED, _libnuma.MPOL_PREFERRED_MANY) and outside:
        free = _free_bytes(nodes)
        if free is None or free >= _PREFERRED_SPILL_BYTES:
            problems.append(
                f"pages landed on nodes {format_ids(frozenset(outside))} although the preferred "
                f"nodes {format_ids(nodes)} have free memory"
            )
        else:
            notes.append("pages spilled off the preferred nodes, which are nearly full")
    elif mode == _libnuma.MPOL_INTERLEAVE:
        if outside:
            problems.append(
                f"interleaved pages landed on nodes {format_ids(frozenset(outside))} outside "
                f"{format_ids(nodes)}"
            )
        elif len(nodes) > 1 and len(placed) > 1 and len(set(placed)) < 2:
            problems.append(f"interleaved pages did not alternate: all on node {placed[0]}")
    elif mode == _libnuma.MPOL_LOCAL:
        try:
            allowed = _libnuma.get_mems_allowed()
        except (NumaSyscallError, LibnumaUnavailableError):
            allowed = frozenset(placed)
        stray = sorted(set(placed) - allowed)
        if stray:
            problems.append(f"pages landed on nodes {stray} outside the allowed memory nodes")
    return found, True


def _free_bytes(nodes: frozenset[int]) -> Optional[int]:
    total = 0
    for node in nodes:
        try:
            total += _libnuma.node_memory(node)[1]
        except (NumaSyscallError, LibnumaUnavailableError):
            return None
    return total


# ------------------------------------------------------------------ entry


def _check_environment_overrides(config: _environ.EnvConfig, topology: Topology) -> None:
    """Parse PYNUMABIND_NODES/CPUS now, so a bad value names its variable."""
    from . import planner
    from ._environ import CPUS_VARIABLE, NODES_VARIABLE, shown

    variable = config.from_environment("nodes")
    if variable == NODES_VARIABLE:
        try:
            planner.parse_nodes_override(config.nodes, universe=frozenset(topology.nodes))
        except (ConfigError, PlanError, ValueError) as exc:
            raise ConfigError(f"invalid {variable}={shown(config.nodes)}: {exc}") from exc
    variable = config.from_environment("cpus")
    if variable == CPUS_VARIABLE:
        try:
            planner.parse_cpus_override(
                config.cpus, universe=topology.online_cpus, allowed=topology.allowed_cpus
            )
        except (ConfigError, PlanError, ValueError) as exc:
            raise ConfigError(f"invalid {variable}={shown(config.cpus)}: {exc}") from exc


def bind_current_process(
    rank: Optional[int] = None,
    *,
    topology: Optional[Topology] = None,
    nprocs: Optional[int] = None,
    mode: Union[str, CpuMode, None] = None,
    memory: Union[str, MemoryPolicy, None] = None,
    nodes: Union[str, Sequence[int], frozenset[int], None] = None,
    cpus: Union[str, Sequence[int], frozenset[int], None] = None,
    device: Optional[int] = None,
    gpu_memory: bool = False,
    interleave_nodes: Union[str, Iterable[int], None] = None,
    migrate: bool = False,
    on_error: str = "warn",
    environ: Optional[Mapping[str, str]] = None,
) -> Binding:
    """Detect, plan and apply this worker's binding; read it back.

    ``rank`` defaults to the launcher's local rank (``LOCAL_RANK``,
    ``OMPI_COMM_WORLD_LOCAL_RANK``, ``SLURM_LOCALID``); options default to
    ``PYNUMABIND_*`` variables; explicit arguments win.  With
    ``PYNUMABIND_DISABLE=1`` it logs and returns a Binding that applied
    nothing.  ``device``, ``gpu_memory`` and ``interleave_nodes`` are passed
    to :func:`~pynumabind.planner.plan`; see :func:`apply_plan` for
    ``migrate`` and ``on_error``.
    """
    from . import _environ

    _check_on_error(on_error)
    config = _environ.resolve(
        os.environ if environ is None else environ,
        rank=rank,
        nprocs=nprocs,
        mode=mode,
        memory=memory,
        nodes=nodes,
        cpus=cpus,
    )
    if config.disabled:
        binding = Binding(
            plan=None,
            applied=False,
            disabled=True,
            notes=(f"disabled by {config.disabled_by}",),
            thread_id=threading.get_native_id(),
        )
        log.info("%s", binding.summary())
        return binding
    assert config.rank is not None  # resolve() raises when no rank is known
    from . import planner

    if topology is None:
        from .discovery import detect_topology

        topology = detect_topology()
    _check_environment_overrides(config, topology)
    options: Dict[str, Any] = {}
    if config.mode is not None:
        options["mode"] = config.mode
    if config.memory is not None:
        options["memory"] = config.memory
    try:
        plan = planner.plan(
            topology,
            config.rank,
            config.nprocs,
            nodes=config.nodes,
            cpus=config.cpus,
            device=device,
            gpu_memory=gpu_memory,
            interleave_nodes=interleave_nodes,
            **options,
        )
    except (ConfigError, PlanError) as exc:
        # Say which settings came from the environment: the user may not know.
        from_env = [
            f"{what} from {source}"
            for what, source in (("rank", config.rank_source), ("nprocs", config.nprocs_source))
            if source not in (None, "argument")
        ]
        from_env += [
            f"{option} from {variable}"
            for option in ("mode", "memory", "nodes", "cpus")
            for variable in [config.from_environment(option)]
            if variable is not None
        ]
        if not from_env:
            raise
        raise type(exc)(f"{exc} (settings from the environment: {', '.join(from_env)})") from exc
    return apply_plan(plan, migrate=migrate, on_error=on_error)
