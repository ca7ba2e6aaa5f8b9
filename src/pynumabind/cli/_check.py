"""``pynumabind check``: bind real worker processes and verify them.

Each rank gets its own freshly *spawned* process (as launchers start
workers), which calls :func:`~pynumabind.bind_current_process` in-process and
then judges the result by the one set of rules in
:mod:`pynumabind.binding._verify` -- the same ones :meth:`~pynumabind.binding.Binding.verify`
applies, so a worker whose ``verify()`` passes cannot fail here for a rule of
check's own:

* ``Binding.verify()``: every thread's affinity, the policy read back, and
  where pages touched afterwards land (``move_pages``);
* an independent read of every thread's ``Cpus_allowed_list`` in
  ``/proc/self/task/*/status`` (not ``sched_getaffinity``), judged by the
  same thread rule -- an extra assertion, not a second rule set;
* the binding was complete (not *partial*).

The parent only collects results; it binds nothing itself.  Each report
carries the plan's reasons and warnings; the count of workers is labelled by
its source in the first reason (``--nprocs``, a launcher variable, or
``chosen by pynumabind check``: the planner's default, chosen in the parent).

Bounds
------
* ``timeout`` bounds the whole run, starting the workers included: the
  deadline is set before the first worker starts; ranks not started by then
  are reported as not started, workers without a report by then as silent,
  and every worker still running at the deadline is killed.
* At most :data:`MAX_WORKERS` workers (one process each); more is a
  :class:`~pynumabind.errors.ConfigError`.
* A worker that cannot be started (fork fails: a process limit such as
  ``ulimit -u`` or a pids cgroup, memory, file descriptors) stops the run
  with one :class:`~pynumabind.errors.PynumabindError` naming the rank and
  the cause.  Whatever way the run ends -- that error, an interrupt, the
  deadline -- every worker it started is killed and reaped before it
  returns: none is left behind to print into the user's terminal.
* Ctrl-C is the parent's: a terminal sends SIGINT to every process of the
  foreground group, workers included, and a worker interrupted while its
  interpreter starts prints a traceback (64 workers: screenfuls).  So each
  worker starts with SIGINT blocked (inherited across fork and exec) and
  never sees it; the parent gets the KeyboardInterrupt, stops every worker,
  and the command says "interrupted" in one line, exit status 130.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import multiprocessing
import signal
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple

from .._os import PROC_ROOT
from .._os import proc as _proc
from ..binding import _verify
from ..cpulist import format_cpulist
from ..discovery._environ import SIZE_VARIABLES
from ..errors import ConfigError, PynumabindError
from ..model import Gpu, Topology
from ..options import CHOSEN_BY_CHECK, Options

if TYPE_CHECKING:  # pragma: no cover
    from ..binding import Binding

log = logging.getLogger(__name__)

_LAUNCHER_COUNTS = frozenset(v for names in SIZE_VARIABLES.values() for v in names)

#: Most workers one check starts: each is a Python process with two pipes.
MAX_WORKERS = 1024


@dataclass(frozen=True)
class WorkerReport:
    """What one worker found about its own binding.

    Id sets are cpulists, ``""`` when empty (as in every JSON form); ``"-"``
    means not known (the worker sent no report).
    """

    rank: int
    ok: bool
    gpu: Optional[str] = None  # "INDEX BUS_ID"; None: no GPU
    planned_cpus: str = "-"
    bound_cpus: str = "-"
    planned_mems: str = "-"
    policy: str = "-"
    page_nodes: str = "-"
    problems: Tuple[str, ...] = ()
    reasons: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = ()  # the plan's, as ``pynumabind plan`` shows them
    not_bound: Optional[str] = None  # left unbound on purpose (disabled, mode advised), and why

    def to_dict(self) -> Dict[str, Any]:
        return {
            "rank": self.rank,
            "ok": self.ok,
            "gpu": self.gpu,
            "planned_cpus": self.planned_cpus,
            "bound_cpus": self.bound_cpus,
            "mems": self.planned_mems,
            "policy": self.policy,
            "page_nodes": self.page_nodes,
            "problems": list(self.problems),
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "not_bound": self.not_bound,
        }


@dataclass(frozen=True)
class CheckReport:
    workers: Tuple[WorkerReport, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return bool(self.workers) and all(w.ok for w in self.workers)

    @property
    def warnings(self) -> Tuple[str, ...]:
        """Every worker's plan warnings, each once, in the order the ranks give them."""
        return tuple(dict.fromkeys(w for worker in self.workers for w in worker.warnings))

    def to_dict(self) -> Dict[str, Any]:
        return {
            "ok": self.ok,
            "warnings": list(self.warnings),
            "workers": [w.to_dict() for w in self.workers],
        }


def _proc_thread_problems(binding: Binding, masks: Dict[int, frozenset[int]]) -> List[str]:
    """The verifier's thread rule, applied to the masks /proc reports."""
    plan = binding.plan
    if plan is None or plan.cpus is None:
        return []
    bound, left, reference = _verify.expected_threads(binding)
    found: Dict[int, Optional[frozenset[int]]] = dict(masks)
    problems, _ = _verify.thread_problems(plan.cpus, bound, left, reference, found)
    return [f"{problem} (per {PROC_ROOT})" for problem in problems]


def _completeness_problems(binding: Binding) -> List[str]:
    problems = [
        f"{skipped.what} not applied: {skipped.reason} (fix: {skipped.fix})"
        for skipped in binding.skipped
    ]
    if binding.partial and not binding.skipped:
        problems.append("binding is partial")
    return problems


class _Logged(logging.Handler):
    """The warnings a worker's pynumabind logs, kept for its report instead of its stderr.

    A worker's stderr is the user's terminal: each worker printing the same
    warning (mode advised without a record, hidden GPUs) said it once per
    worker, and then the report said it again.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.texts: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        self.texts.append(text[len(_PREFIX) :] if text.startswith(_PREFIX) else text)


_PREFIX = "pynumabind: "


def _logged_news(logged: Sequence[str], binding: Binding) -> List[str]:
    """What the worker logged that its report does not say already, each once.

    Left out: a plan warning (logged as it is), and the "bound only partly"
    line, whose every skipped step is one of the report's problems.
    """
    plan = binding.plan
    said = set(plan.warnings) if plan is not None else set()
    if binding.weights_mismatch is not None:  # the report's warnings say it
        said.add(binding.weights_mismatch)
    skipped = [str(s) for s in binding.skipped]
    news: List[str] = []
    for text in logged:
        if text in said or text in news or (skipped and all(s in text for s in skipped)):
            continue
        news.append(text)
    return news


def check_this_process(
    rank: int,
    nprocs: int,
    options: Dict[str, Any],
    topology_json: Optional[str],
    logged: Sequence[str] = (),
    *,
    set_system_weights: bool = False,
) -> WorkerReport:
    """Bind the calling process as ``rank`` and verify the result.

    ``logged``: the warnings logged meanwhile (a live list, read at the end);
    those the report does not already say are added to its warnings.
    """
    from ..binding import bind_current_process

    topology = Topology.from_json(topology_json) if topology_json else None
    # options may carry nprocs_source: where the parent's count came from.
    given = Options(rank=rank, nprocs=nprocs, **options)
    binding = bind_current_process(
        options=given, topology=topology, on_error="warn", set_system_weights=set_system_weights
    )
    plan = binding.plan  # None: PYNUMABIND_DISABLE=1, a deliberate no-op (binding.not_bound)
    verify = binding.verify()
    masks = _proc.thread_status_cpus()
    problems = _completeness_problems(binding) + list(verify.problems)
    problems += _proc_thread_problems(binding, masks)
    warnings = [] if plan is None else list(plan.warnings)
    if binding.weights_mismatch is not None:  # the bind's warning, as plan warnings are shown
        warnings.append(binding.weights_mismatch)
    gpu = None
    if plan is not None and plan.gpu_info is not None:
        gpu = f"{plan.gpu_info.index} {plan.gpu_info.pci_bus_id}"
    placed = sorted({n for n in verify.page_nodes if n >= 0})
    return WorkerReport(
        rank=rank,
        ok=not problems and verify.ok,
        gpu=gpu,
        planned_cpus="unbound" if plan is None or plan.cpus is None else format_cpulist(plan.cpus),
        bound_cpus=format_cpulist(frozenset().union(*masks.values())),
        planned_mems="" if plan is None else format_cpulist(plan.mems),
        policy="none" if plan is None else plan.policy.value,
        page_nodes=format_cpulist(placed),
        problems=tuple(problems),
        reasons=() if plan is None else tuple(plan.reasons),
        warnings=(*warnings, *_logged_news(logged, binding)),
        not_bound=binding.not_bound,
    )


def _worker_main(
    conn: Connection,
    rank: int,
    nprocs: int,
    options: Dict[str, Any],
    topology_json: Optional[str],
    *,
    set_system_weights: bool = False,
) -> None:
    logged = _Logged()
    logger = logging.getLogger("pynumabind")
    logger.addHandler(logged)
    logger.propagate = False  # the report carries them; the parent prints each once
    try:
        report = check_this_process(
            rank,
            nprocs,
            options,
            topology_json,
            logged.texts,
            set_system_weights=set_system_weights,
        )
    except PynumabindError as exc:
        report = WorkerReport(rank=rank, ok=False, problems=(str(exc),))
    except Exception as exc:
        report = WorkerReport(
            rank=rank, ok=False, problems=(f"unexpected {type(exc).__name__}: {exc}",)
        )
    if not report.warnings and logged.texts:  # it failed before reporting what it logged
        report = replace(report, warnings=tuple(dict.fromkeys(logged.texts)))
    try:
        conn.send(report.to_dict())
        conn.close()
    except OSError:  # the parent is gone (stopped or killed): nobody to report to
        pass


def _from_dict(data: Dict[str, Any]) -> WorkerReport:
    return WorkerReport(
        rank=int(data["rank"]),
        ok=bool(data["ok"]),
        gpu=data.get("gpu"),
        planned_cpus=str(data.get("planned_cpus", "-")),
        bound_cpus=str(data.get("bound_cpus", "-")),
        planned_mems=str(data.get("mems", "-")),
        policy=str(data.get("policy", "-")),
        page_nodes=str(data.get("page_nodes", "-")),
        problems=tuple(data.get("problems", ())),
        reasons=tuple(data.get("reasons", ())),
        warnings=tuple(data.get("warnings", ())),
        not_bound=data.get("not_bound"),
    )


@dataclass
class _Worker:
    rank: int
    process: Any  # multiprocessing's SpawnProcess
    conn: Connection
    report: Optional[WorkerReport] = None
    killed: bool = False  # still running at the deadline


def _failed(rank: int, problem: str) -> WorkerReport:
    return WorkerReport(rank=rank, ok=False, problems=(problem,))


def _start(
    context: Any,
    rank: int,
    count: int,
    options: Dict[str, Any],
    topology_json: Optional[str],
    *,
    set_system_weights: bool = False,
) -> _Worker:
    """Start rank ``rank``'s worker; a failure is one error naming the rank and the cause."""
    try:
        parent_end, child_end = context.Pipe(duplex=False)
    except OSError as exc:
        raise _start_error(rank, count, exc) from exc
    try:
        process = context.Process(
            target=_worker_main,
            args=(child_end, rank, count, options, topology_json),
            kwargs={"set_system_weights": set_system_weights},
            name=f"pynumabind-check-{rank}",
        )
        with _interrupts_held():
            process.start()
    except OSError as exc:
        parent_end.close()
        raise _start_error(rank, count, exc) from exc
    finally:
        child_end.close()
    return _Worker(rank, process, parent_end)


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Start a worker with SIGINT blocked: Ctrl-C is the parent's alone (see the module docstring).

    The signal mask survives fork and exec, so the worker's interpreter never
    sees the SIGINT a terminal sends the whole process group: no
    KeyboardInterrupt traceback from a worker half-way through starting up
    (its site imports, spawn's bootstrap).  One that reaches this thread
    while it is blocked waits, and is raised here as the block ends.
    """
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _start_error(rank: int, count: int, exc: OSError) -> PynumabindError:
    name = errno.errorcode.get(exc.errno or 0, "")
    cause = f"{exc.strerror or exc}" + (f" ({name})" if name else "")
    hint = ""
    if exc.errno == errno.EAGAIN:
        hint = "; a process limit (ulimit -u, a pids cgroup) is lower than the ranks need"
    elif exc.errno in (errno.EMFILE, errno.ENFILE):
        hint = "; each worker needs two file descriptors (ulimit -n)"
    elif exc.errno == errno.ENOMEM:
        hint = "; not enough memory for another process"
    return PynumabindError(
        f"check: could not start the worker for rank {rank} of {count}: {cause}{hint}; "
        f"the {rank} worker(s) already started were stopped"
    )


def _collect(workers: List[_Worker], deadline: float, timeout: float) -> None:
    """Each worker's report, as it arrives, until all have one or the deadline passes."""
    pending = list(workers)
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        ready = wait([w.conn for w in pending], timeout=remaining)
        for worker in [w for w in pending if w.conn in ready]:
            pending.remove(worker)
            try:
                worker.report = _from_dict(worker.conn.recv())
            except (EOFError, OSError):
                worker.report = None  # no report: judged by how it exited
    for worker in pending:
        worker.report = _failed(worker.rank, f"no report within {timeout:g} s")


def _stop(workers: List[_Worker], deadline: float) -> None:
    """Let finished workers exit until the deadline, then kill the rest; reap all."""
    for worker in workers:
        worker.process.join(max(0.0, deadline - time.monotonic()))
    for worker in workers:
        if worker.process.is_alive():
            worker.process.kill()
            worker.killed = True
    for worker in workers:
        worker.process.join()
        worker.conn.close()


def run_check(
    topology: Topology,
    options: Options,
    *,
    timeout: float = 60.0,
    pass_topology: bool = False,
    set_system_weights: bool = False,
) -> CheckReport:
    """Spawn one worker per rank, let each bind and verify itself, collect reports.

    The number of ranks is the planner's (``options.nprocs``, else its one
    default), at most :data:`MAX_WORKERS`.  ``pass_topology`` hands the
    parent's topology to the workers (needed when it came from a snapshot or
    carries allowed-set overrides); otherwise each worker detects the machine
    itself, as a real worker would.  ``timeout`` bounds the whole run (see
    the module docstring).  ``set_system_weights``: each worker writes the
    requested weights as the kernel's (see
    :func:`~pynumabind.binding.apply_plan`).
    """
    from ..planner import gpus_by_rank

    deadline = time.monotonic() + timeout
    gpus = gpus_by_rank(topology, options)
    count = len(gpus)
    if count > MAX_WORKERS:
        variable = options.nprocs_source if options.nprocs_source in _LAUNCHER_COUNTS else None
        if options.nprocs is None:
            given = f"{count} local ranks"
        elif variable is not None:
            given = f"{variable}={count}"
        else:
            given = f"{options.spelled('nprocs')} {count}"
        raise ConfigError(
            f"{given}: check starts one worker process per rank, at most {MAX_WORKERS}"
        )
    given_options = options.keywords()
    worker_options = {k: v for k, v in given_options.items() if k not in ("rank", "nprocs")}
    # Each worker's plan says where the count came from: a flag, a launcher
    # variable, or check itself (the planner's default, chosen here).
    worker_options["nprocs_source"] = (
        CHOSEN_BY_CHECK if options.nprocs is None else options.nprocs_source
    )
    context = multiprocessing.get_context("spawn")
    # Spawning starts multiprocessing's resource tracker on first use, and
    # that unblocks SIGINT in this thread as it returns: start it now, before
    # any worker, so every worker starts with SIGINT blocked (_interrupts_held).
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    topology_json = topology.to_json(indent=None) if pass_topology else None
    workers: List[_Worker] = []
    try:
        for rank in range(count):
            if time.monotonic() >= deadline:
                break
            workers.append(
                _start(
                    context,
                    rank,
                    count,
                    worker_options,
                    topology_json,
                    set_system_weights=set_system_weights,
                )
            )
        _collect(workers, deadline, timeout)
    except BaseException:
        _stop(workers, 0.0)  # a worker that failed to start, an interrupt: stop them all now
        raise
    _stop(workers, deadline)
    reports = [_judged(w) for w in workers]
    reports += [
        _failed(rank, f"not started: the {timeout:g} s timeout ran out while starting workers")
        for rank in range(len(workers), count)
    ]
    return CheckReport(tuple(_with_gpu(r, gpus[r.rank]) for r in reports))


def _with_gpu(report: WorkerReport, gpu: Optional[Gpu]) -> WorkerReport:
    """A report without a plan (a failed or disabled worker) names the rank's GPU all the same.

    The parent's rule is the planner's (:func:`~pynumabind.planner.gpus_by_rank`),
    so a worker that did plan shows the same GPU.
    """
    if report.gpu is not None or gpu is None:
        return report
    return replace(report, gpu=f"{gpu.index} {gpu.pci_bus_id}")


def _judged(worker: _Worker) -> WorkerReport:
    """The worker's report, failed when it exited badly or without one."""
    code = worker.process.exitcode
    if worker.report is None:
        return _failed(worker.rank, f"worker exited without a report (exit status {code})")
    if worker.report.ok and code not in (0, None) and not worker.killed:
        return _failed(worker.rank, f"worker exited with status {code}")
    return worker.report
