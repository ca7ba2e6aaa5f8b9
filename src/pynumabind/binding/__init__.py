"""Apply a :class:`~pynumabind.model.Plan` to the running process.

This is the imperative shell around the pure planner: it changes kernel
state, reads it back, and can undo it.  Three rules shape it:

* **All threads, not just the caller.**  CPU affinity is set on every thread
  that is not deliberately pinned elsewhere (see :mod:`pynumabind._os.threads`), so
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
  (``on_error="raise"``).  Any other exception, ``KeyboardInterrupt``
  included, rolls back what was changed before it propagates.  Binds and
  restores in one process are serialised, a fork waits for one in progress
  (the lock is :mod:`pynumabind._os.forksafe`'s), and a bind that leaves the calling
  thread itself unbound is an error, not a success.  A restore changes back
  only threads still of this process and still the same thread (see
  :mod:`._apply`): a thread id outlives its thread and may name another
  process's.
* **Raw syscalls only.**  libnuma's void setters report errors by printing;
  here every policy change goes through ``set_mempolicy`` and friends, whose
  errno becomes a typed error.

The pieces: :mod:`._apply` holds the three steps (CPUs, memory policy,
migration) and the undo journal they write before each change;
:func:`apply_plan` runs them and decides, in one place (``_settle``), whether
a failed step becomes a :class:`Skipped` or a rollback.  :mod:`._verify`
holds the rules :meth:`Binding.verify` (and ``pynumabind check``) judge by;
a bind does not load it (nor :class:`VerifyResult`, which it defines): the
first :meth:`Binding.verify` does, holding the fork lock, and so does the
first lookup of ``VerifyResult`` here (this module's ``__getattr__``).

This module is the public home of the types a :class:`Binding` holds:
:class:`Skipped` (defined in :mod:`._apply`), :class:`ThreadResult` and
:class:`ThreadAction` (defined in :mod:`pynumabind._os.threads`) and :class:`KernelPolicy`
(``policy_read_back``, defined in :mod:`pynumabind._os.libnuma`) are re-exported here, and
``pynumabind`` exports them from here; their defining modules stay private.
"""

from __future__ import annotations

import os
import threading

from .._mempolicy import VERIFY_PAGES
from .._os import forksafe as _forksafe
from .._os import libnuma as _libnuma
from .._os import proc as _proc
from .._os import threads as _threads
from .._os.libnuma import KernelPolicy
from .._os.threads import ThreadAction, ThreadResult
from .._record import field, record, replace
from .._text import format_ids
from ..cpulist import format_cpulist
from ..errors import BindError, ConfigError, PlanError
from ..model import FALLBACK_WARNING, CpuMode, MemoryPolicy, Plan
from ..options import ON_ERROR_CHOICES, Options, union_front
from . import _apply
from ._apply import Journal, Skipped

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

    from typing_extensions import Unpack

    from ..model import Topology
    from ..options import OptionKeywords
    from ._verify import VerifyResult

__all__ = [
    "Binding",
    "KernelPolicy",
    "Skipped",
    "ThreadAction",
    "ThreadResult",
    "VerifyResult",
    "apply_plan",
    "bind_current_process",
]

log = _forksafe.Logger(__name__)  # logging only when needed

# One bind at a time in a process: two threads binding at once would each read
# the other's half-applied masks as "allowed" and "not pinned".  The lock is
# forksafe's (reentrant): bind_current_process holds it over its imports,
# detect, plan and apply_plan, and a fork waits for it, so a child never
# inherits a half-done bind or import; the child gets a fresh one.


@record(frozen=True, eq=False, repr=False)
class Binding:
    """The outcome of applying a plan, read back from the kernel.

    ``str(binding)`` (``print(binding)``) is :meth:`summary`, one line;
    ``repr(binding)`` is that line in angle brackets.  :attr:`cpu_count` is
    the number of CPUs the worker now runs on, for sizing thread pools.

    * ``plan``: what was asked (``None`` when binding was disabled).
    * ``applied``: whether anything was changed (CPUs, policy or pages).
    * ``threads``: per-thread affinity results (tid, name, before, after,
      action); empty when the plan leaves CPUs alone.
    * ``cpus``: the calling thread's affinity now.
    * ``kernel_policy``/``policy_nodes``: the kernel's name of the policy
      requested (``"MPOL_BIND"``, as ``MemoryPlacement.kernel_policy``) and its
      nodes (``None``: memory policy untouched); ``policy_read_back``: the
      calling thread's policy read back with ``get_mempolicy`` (its
      ``kernel_policy``, ``nodes`` and ``flags``; ``None`` when it could not
      be read).
    * ``threads_keeping_policy``: other threads that existed at bind time and
      keep their previous memory policy.
    * ``partial``: something in ``skipped`` was not applied.
    * ``pages_not_moved``: with ``migrate=True``, the kernel's count of pages
      it could not move (``None`` when no migration ran).
    * ``thread_id``: the thread that bound; the memory policy is its own.
    * ``not_bound``: left unbound on purpose, and why; nothing was changed.
      The two deliberate no-ops, shown the same way everywhere (``check``
      lists both under "Not bound, on purpose"): ``PYNUMABIND_DISABLE=1``
      (``"disabled by PYNUMABIND_DISABLE=1"``; ``disabled`` is true and
      ``plan`` ``None``), and mode ``advised`` with an advice record that
      says binding makes no measurable difference here (the reason quotes
      the record).
    * ``kernel_weights``: under weighted interleave, the kernel's system-wide
      weight of each of the policy's nodes when it bound (the weights a
      process's policy follows: Linux has no per-task ones); ``None``
      otherwise or where they could not be read.
    * ``weights_mismatch``: the plan's requested weights split pages otherwise
      than the kernel's, and how to make them the same (also a note, and
      logged once as a warning); ``None`` when they agree or none were asked.
    * ``system_weights_before``: with ``set_system_weights=True``, the
      kernel's weights of those nodes before this bind wrote the requested
      ones; :meth:`restore` does not put them back (see
      :func:`apply_plan`).
    """

    plan: Optional[Plan]
    applied: bool
    disabled: bool = False
    threads: Tuple[ThreadResult, ...] = ()
    threads_converged: bool = True
    cpus: Optional[frozenset[int]] = None
    kernel_policy: Optional[str] = None
    policy_nodes: frozenset[int] = frozenset()
    policy_read_back: Optional[KernelPolicy] = None
    memory_applied: bool = False
    threads_keeping_policy: Tuple[int, ...] = ()
    partial: bool = False
    skipped: Tuple[Skipped, ...] = ()
    migrated: bool = False
    pages_not_moved: Optional[int] = None
    notes: Tuple[str, ...] = ()
    thread_id: int = 0
    not_bound: Optional[str] = None
    kernel_weights: Optional[Mapping[int, int]] = field(default=None, hash=False)
    weights_mismatch: Optional[str] = None
    system_weights_before: Optional[Mapping[int, int]] = field(default=None, hash=False)
    # The undo journal: private, never an argument (set by _journaled), so the
    # reference's signature shows only the public fields.
    _undo: Optional[Journal] = field(default=None, init=False, repr=False, compare=False)

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        plan: Optional[Plan],
        applied: bool,
        disabled: bool = False,
        threads: Tuple[ThreadResult, ...] = (),
        threads_converged: bool = True,
        cpus: Optional[frozenset[int]] = None,
        kernel_policy: Optional[str] = None,
        policy_nodes: frozenset[int] = frozenset(),
        policy_read_back: Optional[KernelPolicy] = None,
        memory_applied: bool = False,
        threads_keeping_policy: Tuple[int, ...] = (),
        partial: bool = False,
        skipped: Tuple[Skipped, ...] = (),
        migrated: bool = False,
        pages_not_moved: Optional[int] = None,
        notes: Tuple[str, ...] = (),
        thread_id: int = 0,
        not_bound: Optional[str] = None,
        kernel_weights: Optional[Mapping[int, int]] = None,
        weights_mismatch: Optional[str] = None,
        system_weights_before: Optional[Mapping[int, int]] = None,
    ) -> None:
        self.__dict__.update(
            plan=plan,
            applied=applied,
            disabled=disabled,
            threads=threads,
            threads_converged=threads_converged,
            cpus=cpus,
            kernel_policy=kernel_policy,
            policy_nodes=policy_nodes,
            policy_read_back=policy_read_back,
            memory_applied=memory_applied,
            threads_keeping_policy=threads_keeping_policy,
            partial=partial,
            skipped=skipped,
            migrated=migrated,
            pages_not_moved=pages_not_moved,
            notes=notes,
            thread_id=thread_id,
            not_bound=not_bound,
            kernel_weights=kernel_weights,
            weights_mismatch=weights_mismatch,
            system_weights_before=system_weights_before,
            _undo=None,  # init=False: _journaled sets it
        )

    @classmethod
    def _journaled(cls, journal: Journal, **fields: Any) -> Binding:
        """A Binding made by :func:`apply_plan`, holding the journal :meth:`restore` undoes."""
        binding = cls(**fields)
        object.__setattr__(binding, "_undo", journal)  # frozen: set once, here
        return binding

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return f"<Binding {self.summary()[len('pynumabind: ') :]}>"

    # ------------------------------------------------------------ queries

    @property
    def threads_bound(self) -> Tuple[int, ...]:
        return tuple(t.tid for t in self.threads if t.action is ThreadAction.BOUND)

    @property
    def threads_left_pinned(self) -> Tuple[int, ...]:
        return tuple(t.tid for t in self.threads if t.action is ThreadAction.LEFT_PINNED)

    @property
    def cpu_count(self) -> int:
        """How many CPUs the worker now runs on: the number to size its thread pools by.

        The plan's CPUs that the calling thread may run on after the bind
        (:attr:`cpus`, read back from the kernel); where the plan leaves CPUs
        alone (mode ``none``, ``PYNUMABIND_DISABLE=1``, mode ``advised``'s
        deliberate no-op), every CPU the thread may run on.  These are the
        CPUs the worker *may* use, not CPUs it has to itself: in mode
        ``node`` every rank on a node gets all of the node's CPUs, so ranks
        sharing a node should divide them (the exclusive modes give each
        rank its own slice).  Docs: "Sizing thread pools" in Binding a worker.
        """
        current = self.cpus if self.cpus is not None else _proc.process_affinity()
        plan = self.plan
        if plan is not None and plan.cpus is not None:
            return len(plan.cpus & current)
        return len(current)

    @property
    def restored(self) -> bool:
        return self._undo is not None and self._undo.restored

    @property
    def threads_exited_at_restore(self) -> Tuple[int, ...]:
        """Bound threads that :meth:`restore` left alone because they had exited."""
        return () if self._undo is None else tuple(sorted(self._undo.exited))

    def summary(self) -> str:
        """The one-line description logged at INFO."""
        if self.disabled or self.plan is None:
            return "pynumabind: binding disabled; nothing applied" + (
                f" ({self.notes[0]})" if self.notes else ""
            )
        plan = self.plan
        if self.not_bound is not None:
            return f"pynumabind: {_who(plan)} left unbound on purpose ({self.not_bound})"
        cpus = "unchanged" if plan.cpus is None else format_ids(self.cpus)
        if self.memory_applied:
            memory = f"nodes {format_ids(self.policy_nodes)} policy {self.kernel_policy}"
        elif plan.policy is MemoryPolicy.NONE:
            memory = "unchanged"
        else:
            memory = f"NOT APPLIED (wanted {plan.policy.value} on {format_ids(plan.mems)})"
        node = "" if plan.node is None else f" (node {plan.node})"
        text = f"pynumabind: {_who(plan)} CPUs {cpus}{node} memory {memory}"
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
        """JSON-ready form (for ``pynumabind exec --json`` and reports).

        Id sets are cpulists, ``""`` when empty (as in ``Plan.to_dict``).
        """
        policy = None
        if self.policy_read_back is not None:
            policy = {
                "kernel_policy": self.policy_read_back.kernel_policy,
                "nodes": format_cpulist(self.policy_read_back.nodes),
                "flags": self.policy_read_back.flags,
            }
        return {
            "plan": None if self.plan is None else self.plan.to_dict(),
            "applied": self.applied,
            "disabled": self.disabled,
            "partial": self.partial,
            "cpus": None if self.cpus is None else format_cpulist(self.cpus),
            "threads": [t.to_dict() for t in self.threads],
            "threads_converged": self.threads_converged,
            "kernel_policy": self.kernel_policy,
            "policy_nodes": format_cpulist(self.policy_nodes),
            "memory_applied": self.memory_applied,
            "policy_read_back": policy,
            "threads_keeping_policy": list(self.threads_keeping_policy),
            "skipped": [s.to_dict() for s in self.skipped],
            "migrated": self.migrated,
            "pages_not_moved": self.pages_not_moved,
            "notes": list(self.notes),
            "not_bound": self.not_bound,
            "kernel_weights": _weights_dict(self.kernel_weights),
            "weights_mismatch": self.weights_mismatch,
            "system_weights_before": _weights_dict(self.system_weights_before),
            "thread_id": self.thread_id,
            "restored": self.restored,
            "threads_exited_at_restore": list(self.threads_exited_at_restore),
        }

    # ------------------------------------------------------------- verify

    def verify(self, pages: int = VERIFY_PAGES) -> VerifyResult:
        """Check that the binding is in force; never raises on a mismatch.

        Reads every thread's affinity, reads the policy back and touches
        ``pages`` fresh anonymous pages to see (``move_pages``) where the
        kernel put them; :mod:`._verify` holds the rules.  Memory is checked
        only when called from the binding thread, whose policy it is.

        Returns:
            The :class:`VerifyResult` -- ``ok``, and each finding.
        """
        with _forksafe.lock():  # it imports and may load libnuma; a fork waits (_os.forksafe)
            from ._verify import verify_binding

            return verify_binding(self, pages)

    # ------------------------------------------------------------ restore

    def restore(self) -> None:
        """Undo the binding: thread masks and the memory policy as they were.

        Threads started after the bind that inherited the bound CPUs go back
        to the caller's previous mask too.  Must run on the binding thread
        when a memory policy was applied (it is that thread's), in the process
        that bound (not a forked child), and after any newer binding that
        changed the same things was restored (a stack; see
        :class:`._apply.Journal`).  Idempotent.  Raises :class:`BindError`
        when refused (nothing changed) or if something could not be put back.

        Only threads still of this process and still the same thread (the
        start time read when it was bound) are changed back: a bound thread
        that has exited is left alone -- its id may name another process's
        thread by now -- and listed in :attr:`threads_exited_at_restore` and
        the log.  Holds the bind lock: restores and binds are serialised, and
        a fork waits for a restore in progress.

        Raises:
            BindError: the restore was refused (another thread, a forked
                child, a newer binding still in force) or something could
                not be put back.
        """
        journal = self._undo
        if journal is None:
            return
        with _forksafe.lock():
            failures = journal.restore()
        exited = self.threads_exited_at_restore
        if exited:
            log.info(
                "pynumabind: restore left alone %d bound thread(s) that had exited "
                "(ids %s may name other threads by now)",
                len(exited),
                format_ids(frozenset(exited)),
            )
        if failures:
            raise BindError("could not fully restore the binding: " + "; ".join(failures))
        log.debug("pynumabind: binding restored")

    def __enter__(self) -> Binding:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.restore()


def _weights_dict(weights: Optional[Mapping[int, int]]) -> Optional[Dict[str, int]]:
    """Weights as JSON: node ids as keys (strings), as ``Plan.to_dict`` writes them."""
    return None if weights is None else {str(n): w for n, w in sorted(weights.items())}


if not TYPE_CHECKING:  # type checkers see the import above, and no catch-all

    def __getattr__(name: str) -> Any:
        """:class:`VerifyResult`, imported on first lookup (holding the fork lock)."""
        if name != "VerifyResult":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        with _forksafe.lock():
            from ._verify import VerifyResult

        globals()[name] = VerifyResult
        return VerifyResult


def _who(plan: Plan) -> str:
    """``rank 1 GPU 1 (0000:...)``, or for a union plan (no rank) ``GPUs 0-1``/``GPU 3 (...)``."""
    info = plan.gpu_info
    gpu = "none" if info is None else f"{info.index} ({info.pci_bus_id})"
    if plan.rank is not None:
        return f"rank {plan.rank} GPU {gpu}"
    if len(plan.gpus) == 1 and plan.gpu_info is not None:
        return f"GPU {gpu}"
    return f"GPUs {format_ids(frozenset(plan.gpus))}"


# ------------------------------------------------------------------ apply


def _check_on_error(on_error: str) -> None:
    if on_error not in ON_ERROR_CHOICES:
        raise ConfigError(
            f"invalid on_error {on_error!r}; choose one of: {', '.join(ON_ERROR_CHOICES)}"
        )


def _check_system_weights(plan: Plan, set_system_weights: object) -> None:
    """``set_system_weights`` is a bool, and True only for a plan with weights to set."""
    if not isinstance(set_system_weights, bool):
        raise ConfigError(f"set_system_weights must be True or False, not {set_system_weights!r}")
    if set_system_weights and plan.weights is None:
        which = "has no weights" if plan.policy.value == "weighted-interleave" else "has policy"
        raise ConfigError(
            "set_system_weights=True writes the requested weights as the kernel's: it needs "
            f"policy 'weighted-interleave' with weights= (this plan {which}"
            f"{'' if which.endswith('weights') else ' ' + repr(plan.policy.value)})"
        )


def apply_plan(
    plan: Plan, *, migrate: bool = False, on_error: str = "warn", set_system_weights: bool = False
) -> Binding:
    """Apply ``plan`` to this process and read the result back.

    CPU affinity goes to every thread not pinned elsewhere; the memory
    policy to the calling thread (inherited by threads it starts later).
    ``migrate=True`` also moves pages already allocated onto the plan's
    nodes.  See the module docstring for ``on_error``, and :mod:`._apply`
    for the steps and their undo journal.

    Weighted interleave: a process's (and its threads') policy follows the
    kernel's system-wide weights (Linux has no per-task weights).  The bind
    reads them (:attr:`Binding.kernel_weights`); where the plan's requested
    weights split pages otherwise, it says so once (a warning, a note and
    :attr:`Binding.weights_mismatch`) and binds all the same.
    ``set_system_weights=True`` (root only) writes the requested weights as
    the kernel's instead, as the last step: that changes every process's
    weighted interleave on the machine, so it is never done unasked, and
    :meth:`Binding.restore` does not undo it (the job's other processes
    follow the same weights; :attr:`Binding.system_weights_before` says what
    they were).  A failed write is handled as a failed memory-policy step
    (``on_error``), with what it wrote put back.

    Args:
        plan: The plan to apply (from :func:`~pynumabind.plan`).
        migrate: Also move the pages already allocated onto the plan's
            nodes (``migrate_pages``); the binding reports how many could not
            be moved.
        on_error: What a denied memory-policy step does: ``"warn"`` (keep the
            CPU binding, log one warning, return a partial binding) or
            ``"raise"`` (roll everything back and raise).
        set_system_weights: Write the plan's weights as the kernel's
            system-wide weighted-interleave weights (root; see above).

    Returns:
        The :class:`Binding`, read back from the kernel; ``partial`` when
        ``on_error="warn"`` let a denied memory-policy step go (``skipped``
        says which, why, and the fix).

    Raises:
        BindError: a step failed and everything already applied was rolled
            back: the CPU side always, the memory policy with
            ``on_error="raise"``.
        PlanError: the plan has an empty CPU set.
        ConfigError: ``on_error`` is neither ``"warn"`` nor ``"raise"``, or
            ``set_system_weights=True`` for a plan without weights.

    A memory-policy step that fails because ``libnuma.so.1`` is missing is
    handled as a denied one: skipped with a warning, or rolled back.
    """
    _check_on_error(on_error)
    _check_system_weights(plan, set_system_weights)
    if plan.cpus is not None and not plan.cpus:
        raise PlanError(f"plan for {_who(plan)} has an empty CPU set")
    bind_lock = _forksafe.lock()
    journal: Optional[Journal] = None
    try:  # outside the lock's with: an interrupt as it releases must roll back too
        with bind_lock:
            # May load libnuma and read the kernel's weights: under the lock.
            request = _apply.policy_request(plan, set_system_weights=set_system_weights)
            journal = Journal()
            return _apply_steps(plan, request, journal, migrate=migrate, on_error=on_error)
    except BaseException:
        if journal is not None:
            with bind_lock:
                journal.rollback()  # never half-bound: whatever was recorded goes back
        raise


def _apply_steps(
    plan: Plan,
    request: _apply.PolicyRequest,
    journal: Journal,
    *,
    migrate: bool,
    on_error: str,
) -> Binding:
    """CPUs, memory policy, migration, the kernel's weights, read back; may raise from here."""
    notes: List[str] = [n for n in (request.note, request.weights_note, request.mismatch) if n]
    skipped: List[Skipped] = []
    caller = journal.thread_id
    before = _proc.process_affinity()
    scan = _cpu_step(plan, before, journal, on_error, skipped)
    memory_applied = False
    if request.mode is not None:
        failure = _apply.set_policy(request, journal)
        _settle("memory policy", failure, journal, on_error, skipped)
        memory_applied = failure is None
    migration = _apply.MigrationOutcome()
    if migrate:
        migration = _apply.migrate_pages(plan)
        _settle("page migration", migration.failure, journal, on_error, skipped)
        notes.extend([migration.note] if migration.note else [])
    kernel_weights: Optional[Mapping[int, int]] = request.kernel_weights
    weights_before: Optional[Mapping[int, int]] = None
    if request.write_weights is not None and memory_applied:
        kernel_weights, weights_before = _weights_step(request, journal, on_error, skipped, notes)
    threads_keeping = _threads_keeping(scan, caller, memory_applied, notes)
    readback, readback_note = _apply.read_back_policy(request, memory_applied)
    notes.extend([readback_note] if readback_note else [])
    binding = Binding._journaled(
        journal,
        plan=plan,
        applied=scan is not None or memory_applied or migration.migrated,
        threads=scan.results if scan is not None else (),
        threads_converged=scan.converged if scan is not None else True,
        cpus=_caller_cpus(scan, caller, before),
        kernel_policy=None if request.mode is None else _libnuma.MODE_NAMES[request.mode],
        policy_nodes=request.nodes,
        policy_read_back=readback,
        memory_applied=memory_applied,
        threads_keeping_policy=threads_keeping,
        partial=bool(skipped),
        skipped=tuple(skipped),
        migrated=migration.migrated,
        pages_not_moved=migration.pages_not_moved,
        notes=tuple(notes),
        thread_id=caller,
        kernel_weights=kernel_weights,
        weights_mismatch=request.mismatch,
        system_weights_before=weights_before,
    )
    _log_outcome(binding)
    return binding


def _threads_keeping(
    scan: Optional[_threads.ThreadScan], caller: int, memory_applied: bool, notes: List[str]
) -> Tuple[int, ...]:
    """The threads that keep their own memory policy (a note when there are some)."""
    if not memory_applied:
        return ()
    threads_keeping = _apply.threads_keeping_policy(scan, caller)
    if threads_keeping:
        notes.append(
            f"{len(threads_keeping)} thread(s) that already existed keep their memory policy "
            "(only the calling thread's can be set; threads it starts inherit it)"
        )
    return threads_keeping


def _cpu_step(
    plan: Plan, before: frozenset[int], journal: Journal, on_error: str, skipped: List[Skipped]
) -> Optional[_threads.ThreadScan]:
    """Step 1: every thread's CPUs (None: the plan leaves them alone)."""
    if plan.cpus is None:
        return None
    scan = _apply.bind_cpus(plan.cpus, before, journal)
    if not scan.converged:
        churn = _apply.ThreadChurn(
            f"threads kept appearing after {scan.passes} scans; a thread the scan missed "
            "keeps its old CPUs, and so do the threads it starts"
        )
        _settle("CPU affinity of late threads", churn, journal, on_error, skipped)
    return scan


def _weights_step(
    request: _apply.PolicyRequest,
    journal: Journal,
    on_error: str,
    skipped: List[Skipped],
    notes: List[str],
) -> Tuple[Optional[Mapping[int, int]], Optional[Mapping[int, int]]]:
    """Step 4, ``set_system_weights``: the kernel's weights now, and what they were."""
    failure, written, weights_before = _apply.write_system_weights(request)
    _settle(_apply.SYSTEM_WEIGHTS, failure, journal, on_error, skipped)
    if written is None:
        return request.kernel_weights, None
    notes.append(written)
    return request.write_weights, weights_before


def _settle(
    what: str,
    failure: Optional[Exception],
    journal: Journal,
    on_error: str,
    skipped: List[Skipped],
) -> None:
    """The one place a step's failure becomes a skip, or a rollback and a BindError."""
    if failure is None:
        return
    fix = _apply.fix_for(failure, what, _apply.allowed_mems_for(failure))
    if on_error == "raise":
        failures = journal.rollback()
        extra = f"; could not roll back: {'; '.join(failures)}" if failures else ""
        raise BindError(f"{what} failed: {failure}; {fix}; rolled back{extra}") from failure
    skipped.append(Skipped(what, str(failure), fix, getattr(failure, "errno", None)))


def _log_outcome(binding: Binding) -> None:
    """One WARNING when partial (with the fix), left unbound by an unknown GPU node, bound
    by ``fallback="nearest"`` away from its GPU's node (naming the cpuset), or with
    requested interleave weights the kernel's do not match; one INFO.

    The INFO line names the GPU (index and PCI bus id), the CPUs and their
    node, and the memory policy as read back.
    """
    if binding.skipped and binding.plan is not None:
        log.warning(
            "pynumabind: %s bound only partly; %s",
            _who(binding.plan),
            "; ".join(str(s) for s in binding.skipped)
            + ("; CPU affinity was applied" if binding.plan.cpus is not None else ""),
        )
    plan = binding.plan
    for warning in plan.warnings if plan is not None else ():
        if warning.startswith(FALLBACK_WARNING):
            log.warning("pynumabind: %s", warning)
    if binding.weights_mismatch is not None and plan is not None:
        log.warning("pynumabind: %s: %s", _who(plan), binding.weights_mismatch)
    if (
        plan is not None
        and plan.gpu_info is not None
        and plan.cpus is None
        and plan.mode is not CpuMode.NONE
    ):
        log.warning(
            "pynumabind: %s left unbound: the NUMA node of GPU %d (%s) is unknown; "
            "name it with PYNUMABIND_NODES, or set PYNUMABIND_REQUIRE_NODE=1 to fail instead",
            _who(plan),
            plan.gpu_info.index,
            plan.gpu_info.pci_bus_id,
        )
    if log.isEnabledFor(_forksafe.INFO):
        log.info("%s", binding.summary())


def _caller_cpus(
    scan: Optional[_threads.ThreadScan], caller: int, before: frozenset[int]
) -> frozenset[int]:
    """The caller's mask now: read back by the scan, or unchanged."""
    if scan is not None:
        for result in scan.results:
            if result.tid == caller and result.after is not None:
                return result.after
    return before


# ------------------------------------------------------------------ entry


def bind_current_process(
    rank: Optional[int] = None,
    *,
    options: Optional[Options] = None,
    topology: Optional[Topology] = None,
    nprocs: Optional[int] = None,
    mode: Union[str, CpuMode, None] = None,
    policy: Union[str, MemoryPolicy, None] = None,
    migrate: bool = False,
    on_error: str = "warn",
    environ: Optional[Mapping[str, str]] = None,
    set_system_weights: bool = False,
    **keywords: Unpack[OptionKeywords],
) -> Binding:
    """Detect, plan and apply this worker's binding; read it back.

    ``rank`` defaults to the launcher's local rank (``LOCAL_RANK``,
    ``OMPI_COMM_WORLD_LOCAL_RANK``, ``SLURM_LOCALID``); options default to
    ``PYNUMABIND_*`` variables; explicit arguments win.  With no rank from
    either, a ``nodes`` or ``cpus`` override of one entry is this process's
    placement (as numactl's, ``pynumabind exec --nodes 1``); one of several
    entries needs a rank to choose it (the ConfigError "no local rank" says
    so).  With no rank and no override, the process is bound to the GPUs it
    sees (a Ray actor, a process
    started with ``CUDA_VISIBLE_DEVICES=3``): one GPU's node, or the union of
    several (:func:`~pynumabind.planner.plan_gpus_for`); seeing none is
    the ConfigError "no local rank".  ``gpus=[i, j]`` (visible GPU
    indices, not with ``rank``) asks for that union explicitly and wins over
    a launcher's rank.  With ``PYNUMABIND_DISABLE=1`` it logs and returns a
    Binding that applied nothing.  ``options``: a :class:`~pynumabind.Options`
    instead of the plan keywords (``rank``, ``nprocs``, ``mode``, ``policy``
    and :class:`~pynumabind.options.OptionKeywords`: ``gpu``, ``gpus``,
    ``nodes``, ``cpus``, ``gpu_memory``, ``interleave_nodes``...), as
    :func:`~pynumabind.planner.plan` takes them.  Every variable, visibility
    included, comes from ``environ`` (default ``os.environ``), and the
    machine from :func:`~pynumabind.discovery.resolve_topology`.  See
    :func:`apply_plan` for ``migrate``, ``on_error`` and
    ``set_system_weights``.

    ``policy="weighted-interleave"`` (``PYNUMABIND_POLICY``) with
    ``weights={0: 3, 2: 1}`` (``PYNUMABIND_WEIGHTS=0:3,2:1``) spreads pages
    over those nodes; the process's policy follows the kernel's system-wide
    weights, which the bind reads and compares with these (one warning when
    they differ; ``set_system_weights=True`` writes them instead, as root).
    Without weights it follows the kernel's for the plan's nodes.  Before
    Linux 6.9 it is plain interleave over the same nodes, with one note.

    ``mode="advised"`` (``PYNUMABIND_MODE=advised``) follows this machine's
    advice record (:mod:`pynumabind.advisor.record`): the measured mode,
    policy and GPU nodes; or, where the record says binding makes no
    difference, nothing at all (:attr:`Binding.not_bound` says why); or,
    with no usable record, one warning and the default mode's plan.

    Args:
        rank: The local rank (default: from the launcher's variables).
        options: The plan's settings as one :class:`~pynumabind.Options`,
            instead of the keywords.
        topology: The machine to plan on (default:
            :func:`~pynumabind.resolve_topology`).
        nprocs: How many local processes (default: the launcher's count, else
            one per visible GPU).
        mode: The CPU mode (default ``PYNUMABIND_MODE``, else ``node``);
            ``"advised"`` follows this machine's advice record (below).
        policy: The memory policy (default ``PYNUMABIND_POLICY``, else
            ``preferred``).
        migrate: Also move the pages already allocated (see
            :func:`apply_plan`).
        on_error: ``"warn"`` or ``"raise"`` (see :func:`apply_plan`).
        environ: Where every variable comes from (default ``os.environ``).
        set_system_weights: Write the requested weights as the kernel's
            system-wide ones (root; see :func:`apply_plan`).
        **keywords: the rest of :class:`~pynumabind.Options`'s settings, by
            name: ``nodes``, ``cpus``, ``gpu``, ``gpus``, ``rank_gpus``,
            ``gpu_memory``, ``interleave_nodes``, ``weights``, ``require_node``,
            ``local_gpus``, ``priority_cores`` (each described there).

    Returns:
        The :class:`Binding` -- the plan, what each thread got, the policy read
        back, and whether anything was skipped; with ``PYNUMABIND_DISABLE=1``,
        one that applied nothing; in mode ``advised`` with a record that says
        binding makes no difference, one that changed nothing and says why
        (:attr:`Binding.not_bound`).

    Raises:
        ConfigError: a bad argument or variable (named), or no rank and
            neither a one-entry override nor a visible GPU ("no local rank").
        PlanError: the plan cannot be made here, for instance the CPUs it
            needs are outside this process's cpuset or affinity mask (the
            message names the CPUs wanted and allowed).
        TopologyError: the machine cannot be read, or the snapshot given is
            missing or bad.
        BindError: applying failed and was rolled back (see
            :func:`apply_plan`).
    """
    _check_on_error(on_error)
    if not isinstance(set_system_weights, bool):
        raise ConfigError(f"set_system_weights must be True or False, not {set_system_weights!r}")
    given = union_front(options, dict(keywords, rank=rank, nprocs=nprocs, mode=mode, policy=policy))
    with _forksafe.lock():  # a fork waits for these first-use imports (see _os.forksafe)
        from ..discovery import _environ
    env = os.environ if environ is None else environ
    resolved = _environ.resolve(env, given, need_rank=False)
    if resolved.disabled:
        return _disabled(resolved)
    binding: Optional[Binding] = None
    try:
        with _forksafe.lock():  # what detect reads as allowed must not be another bind's half-work
            if topology is None:
                from ..discovery import detail_for, resolve_topology

                topology = resolve_topology(
                    environ=env,
                    detail=detail_for(resolved.mode, resolved.priority_cores, resolved.tiers),
                    reuse=True,
                )
            advised = None
            if resolved.cpu_mode is CpuMode.ADVISED:  # the record decides, read here
                from ..records.store import resolve_advised

                advised = resolve_advised(resolved, topology, env)
                resolved, topology = advised.options, advised.topology
            plan = _plan(topology, resolved)
            if advised is not None:
                plan = advised.finish(plan)
                if advised.not_bound is not None:
                    return _not_bound(plan, advised.not_bound)
            binding = apply_plan(
                plan, migrate=migrate, on_error=on_error, set_system_weights=set_system_weights
            )
    except BaseException:
        if binding is not None and binding._undo is not None:  # interrupted as the lock went
            with _forksafe.lock():
                binding._undo.rollback()
        raise
    return binding


def _plan(topology: Topology, options: Options) -> Plan:
    """The plan for explicit ``gpus``, for a rank, or (no rank) for the visible GPUs."""
    from .. import planner
    from ..discovery import _environ

    if options.gpus is not None:
        return planner.plan_gpus_for(topology, options, options.gpus)
    if options.rank is not None:
        return planner.plan_for(topology, options)
    placed = _given_placement(topology, options)
    if placed is not None:
        return placed
    from ..discovery import ray_gpus  # never imports Ray itself

    given = ray_gpus(topology)
    if given is not None:  # a Ray task or actor: the GPUs Ray gave it, not all it sees
        if options.fallback is None:  # as in the framework hooks: a Ray worker always starts
            options = replace(options, fallback="nearest")
        rule = (
            f"no launcher rank: bound to the {len(given)} GPU(s) Ray gave this process "
            "(ray.get_gpu_ids())"
        )
        plan = planner.plan_gpus_for(topology, options, given)
        return replace(plan, reasons=(rule, *plan.reasons))
    if not topology.gpus:
        raise ConfigError(f"{_environ.no_rank(options)}, and this process sees no GPU to bind to")
    visible = list(range(len(topology.gpus)))
    if options.local_gpus is None:  # the GPUs it sees are the ranks (a Ray actor's)
        options = replace(options, local_gpus=tuple(visible))
    plan = planner.plan_gpus_for(topology, options, visible)
    rule = (
        f"no launcher rank: bound to the {len(visible)} GPU(s) this process sees "
        "(one: its node; several: the union)"
    )
    return replace(plan, reasons=(rule, *plan.reasons))


def _given_placement(topology: Topology, options: Options) -> Optional[Plan]:
    """No rank, and a ``nodes`` or ``cpus`` override with one entry: that placement, as numactl.

    One entry is one rank's placement, so it is this process's (rank 0 of
    1) whatever GPUs it sees.  Several entries are several ranks'
    placements: which is this process's needs a rank, and saying so is
    better than guessing.  ``None``: no override given (the GPU rules decide).
    """
    from .. import planner
    from ..discovery import _environ

    given = [name for name in ("nodes", "cpus") if getattr(options, name) is not None]
    if not given:
        return None
    count = planner.local_ranks(topology, options)
    spelled = " and ".join(
        options.from_environment(name) or options.spelled(name) for name in given
    )
    if count != 1:
        raise ConfigError(
            f"{_environ.no_rank(options)}: {spelled} {'give' if len(given) > 1 else 'gives'} "
            f"the placements of {count} ranks, and the rank chooses this process's; give "
            "one placement (one entry) to bind without a rank"
        )
    plan = planner.plan_for(topology, replace(options, rank=0))
    rule = f"no launcher rank: {spelled} {'give' if len(given) > 1 else 'gives'} one placement"
    return replace(plan, reasons=(f"{rule}, this process's (as numactl)", *plan.reasons))


def _not_bound(plan: Plan, why: str) -> Binding:
    """Mode advised and a record that says do not bind: a logged Binding that changed nothing."""
    binding = Binding(
        plan=plan,
        applied=False,
        cpus=_proc.process_affinity(),
        notes=(why,),
        thread_id=threading.get_native_id(),
        not_bound=why,
    )
    log.info("%s", binding.summary())
    return binding


def _disabled(options: Options) -> Binding:
    """PYNUMABIND_DISABLE: a logged Binding that applied nothing."""
    binding = Binding(
        plan=None,
        applied=False,
        disabled=True,
        cpus=_proc.process_affinity(),  # unchanged: what cpu_count counts
        notes=(f"disabled by {options.disabled_by}",),
        thread_id=threading.get_native_id(),
        not_bound=f"disabled by {options.disabled_by}",  # a deliberate no-op, as advised's
    )
    log.info("%s", binding.summary())
    return binding
