"""``pynumabind check``: bind real worker processes and verify them.

Each rank gets its own freshly *spawned* process (as launchers start
workers), which calls :func:`~pynumabind.bind_current_process` in-process and
then judges the result by the one set of rules in :mod:`._verify` -- the
same ones :meth:`Binding.verify` applies, so a worker whose ``verify()``
passes cannot fail here for a rule of check's own:

* ``Binding.verify()``: every thread's affinity, the policy read back, and
  where pages touched afterwards land (``move_pages``);
* an independent read of every thread's ``Cpus_allowed_list`` in
  ``/proc/self/task/*/status`` (not ``sched_getaffinity``), judged by the
  same thread rule -- an extra assertion, not a second rule set;
* the binding was complete (not *partial*).

The parent only collects results; it binds nothing itself.
"""

from __future__ import annotations

import glob
import logging
import multiprocessing
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from . import _verify
from ._options import Options
from .cpulist import format_cpulist, parse_cpulist
from .errors import PynumabindError
from .model import Topology

if TYPE_CHECKING:  # pragma: no cover
    from .binder import Binding

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerReport:
    """What one worker found about its own binding.

    Id sets are cpulists, ``""`` when empty (as in every JSON form); ``"-"``
    means not known (the worker sent no report).
    """

    rank: int
    ok: bool
    device: Optional[str] = None
    planned_cpus: str = "-"
    actual_cpus: str = "-"
    planned_mems: str = "-"
    policy: str = "-"
    page_nodes: str = "-"
    problems: Tuple[str, ...] = ()
    reasons: Tuple[str, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        return {
            "rank": self.rank,
            "ok": self.ok,
            "device": self.device,
            "planned_cpus": self.planned_cpus,
            "bound_cpus": self.actual_cpus,
            "mems": self.planned_mems,
            "policy": self.policy,
            "page_nodes": self.page_nodes,
            "problems": list(self.problems),
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class CheckReport:
    workers: Tuple[WorkerReport, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return bool(self.workers) and all(w.ok for w in self.workers)

    def to_dict(self) -> Dict[str, Any]:
        return {"ok": self.ok, "workers": [w.to_dict() for w in self.workers]}


def _thread_cpus() -> Dict[int, frozenset[int]]:
    """Each thread's allowed CPUs as the kernel reports them."""
    out: Dict[int, frozenset[int]] = {}
    for path in glob.glob("/proc/self/task/*/status"):
        try:
            with open(path, encoding="ascii") as handle:
                for line in handle:
                    if line.startswith("Cpus_allowed_list:"):
                        out[int(path.split("/")[4])] = parse_cpulist(line.split(":", 1)[1])
        except (FileNotFoundError, ProcessLookupError):  # the thread exited meanwhile
            continue
    return out


def _proc_thread_problems(binding: Binding, masks: Dict[int, frozenset[int]]) -> List[str]:
    """The verifier's thread rule, applied to the masks /proc reports."""
    plan = binding.plan
    if plan is None or plan.cpus is None:
        return []
    bound, left, reference = _verify.expected_threads(binding)
    found: Dict[int, Optional[frozenset[int]]] = dict(masks)
    problems, _ = _verify.thread_problems(plan.cpus, bound, left, reference, found)
    return [f"{problem} (per /proc)" for problem in problems]


def _completeness_problems(binding: Binding) -> List[str]:
    problems = [
        f"{skipped.what} not applied: {skipped.reason} (fix: {skipped.fix})"
        for skipped in binding.skipped
    ]
    if binding.partial and not binding.skipped:
        problems.append("binding is partial")
    return problems


def check_this_process(
    rank: int, nprocs: int, options: Dict[str, Any], topology_json: Optional[str]
) -> WorkerReport:
    """Bind the calling process as ``rank`` and verify the result."""
    from .binder import bind_current_process

    topology = Topology.from_json(topology_json) if topology_json else None
    binding = bind_current_process(
        rank, topology=topology, nprocs=nprocs, on_error="warn", **options
    )
    plan = binding.plan
    if plan is None:  # PYNUMABIND_DISABLE=1 made binding a no-op
        return WorkerReport(
            rank=rank,
            ok=False,
            problems=tuple(binding.notes) or ("binding is disabled (PYNUMABIND_DISABLE)",),
        )
    verify = binding.verify()
    masks = _thread_cpus()
    problems = _completeness_problems(binding) + list(verify.problems)
    problems += _proc_thread_problems(binding, masks)
    device = None
    if plan.device is not None:
        device = f"{plan.device.index} {plan.device.pci_bus_id}"
    placed = sorted({n for n in verify.page_nodes if n >= 0})
    return WorkerReport(
        rank=rank,
        ok=not problems and verify.ok,
        device=device,
        planned_cpus="unbound" if plan.cpus is None else format_cpulist(plan.cpus),
        actual_cpus=format_cpulist(frozenset().union(*masks.values())),
        planned_mems=format_cpulist(plan.mems),
        policy=plan.policy.value,
        page_nodes=format_cpulist(placed),
        problems=tuple(problems),
        reasons=tuple(plan.reasons),
    )


def _worker_main(
    conn: Connection, rank: int, nprocs: int, options: Dict[str, Any], topology_json: Optional[str]
) -> None:
    try:
        report = check_this_process(rank, nprocs, options, topology_json)
    except PynumabindError as exc:
        report = WorkerReport(rank=rank, ok=False, problems=(str(exc),))
    except Exception as exc:
        report = WorkerReport(
            rank=rank, ok=False, problems=(f"unexpected {type(exc).__name__}: {exc}",)
        )
    conn.send(report.to_dict())
    conn.close()


def _from_dict(data: Dict[str, Any]) -> WorkerReport:
    return WorkerReport(
        rank=int(data["rank"]),
        ok=bool(data["ok"]),
        device=data.get("device"),
        planned_cpus=str(data.get("planned_cpus", "-")),
        actual_cpus=str(data.get("bound_cpus", "-")),
        planned_mems=str(data.get("mems", "-")),
        policy=str(data.get("policy", "-")),
        page_nodes=str(data.get("page_nodes", "-")),
        problems=tuple(data.get("problems", ())),
        reasons=tuple(data.get("reasons", ())),
    )


def run_check(
    topology: Topology,
    options: Options,
    *,
    timeout: float = 60.0,
    pass_topology: bool = False,
) -> CheckReport:
    """Spawn one worker per rank, let each bind and verify itself, collect reports.

    The number of ranks is the planner's (``options.nprocs``, else its one
    default).  ``pass_topology`` hands the parent's topology to the workers
    (needed when it came from a snapshot or carries allowed-set overrides);
    otherwise each worker detects the machine itself, as a real worker would.
    """
    from .planner import local_ranks

    count = local_ranks(topology, options)
    given = options.keywords()
    worker_options = {k: v for k, v in given.items() if k not in ("rank", "nprocs")}
    context = multiprocessing.get_context("spawn")
    topology_json = topology.to_json(indent=None) if pass_topology else None
    running = []
    for rank in range(count):
        parent_end, child_end = context.Pipe(duplex=False)
        process = context.Process(
            target=_worker_main,
            args=(child_end, rank, count, worker_options, topology_json),
            name=f"pynumabind-check-{rank}",
        )
        process.start()
        child_end.close()
        running.append((rank, process, parent_end))
    deadline = time.monotonic() + timeout
    reports: List[WorkerReport] = []
    for rank, process, conn in running:
        remaining = max(0.0, deadline - time.monotonic())
        if conn.poll(remaining):
            try:
                reports.append(_from_dict(conn.recv()))
            except EOFError:
                reports.append(
                    WorkerReport(rank=rank, ok=False, problems=("worker exited without a report",))
                )
        else:
            reports.append(
                WorkerReport(rank=rank, ok=False, problems=(f"no report within {timeout:g} s",))
            )
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()
        elif process.exitcode not in (0, None) and reports[-1].ok:
            reports[-1] = WorkerReport(
                rank=rank, ok=False, problems=(f"worker exited with status {process.exitcode}",)
            )
    return CheckReport(tuple(reports))
