"""The ``pynumabind`` command line: show, plan, exec, check, snapshot, advise, records, report.

Every command reads the machine the same way (this one, a ``--sysfs-root``
tree, or a ``--topology`` snapshot), prints aligned tables or, with
``--json``, a documented JSON document, and maps failures to exit codes:

* 0: success;
* 1: failure (an unreadable topology, an impossible plan, a worker not
  bound as planned);
* 2: usage error (an unknown option, named wherever it stands -- before
  the command too --, bad option values, bad environment variables, and any
  value naming something this machine lacks or the wrong kind of thing: a
  CPU, a NUMA node, a rank beyond the local ranks, a topology file that does
  not exist or is not a snapshot, a ``--sysfs-root`` that is not a sysfs
  tree, a ``snapshot -o`` that is a directory or in one that does not
  exist; ``snapshot --json`` too: a snapshot is JSON already);
* 126/127: ``exec`` could not run the command (not executable / not found).

Errors are one line on stderr, never a traceback, and name the option of the
command line (``--rank``, ``--nprocs``) or the variable the value came from.
``plan`` and ``check -v`` write reasons every rank shares once ("all ranks:"),
then each rank's own; ``check`` shows the plan's warnings too (text and JSON),
explains its columns, and on a machine with no GPU and one NUMA node says in
one line what it did and why.  A bare ``pynumabind`` lists the commands; ``--help``
describes each command and shows examples.  ``exec`` replaces the
process with ``os.execvp``: no shell is involved, so no argument is ever
re-interpreted.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys

from .. import discovery
from .._os import forksafe
from .._text import counted, format_ids, human_bytes, table
from ..cpulist import format_cpulist, parse_cpulist, parse_nodelist
from ..errors import ConfigError, ListParseError, PynumabindError, TopologyError
from ..model import SCHEMA_VERSION, CpuMode, Gpu, NumaNode, Plan, Topology
from ..options import Options
from . import _execline
from ._tables import by_rank
from ._usage import UsageError

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    import argparse
    from typing import (
        Any,
        Dict,
        Iterator,
        List,
        Mapping,
        Optional,
        Sequence,
        Tuple,
        Union,
    )

    from ._report import Layout

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127

#: Every document a command prints is versioned by the package's one JSON
#: schema number (the rule: :data:`pynumabind.model.SCHEMA_VERSION`).
JSON_SCHEMA_VERSION = SCHEMA_VERSION


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The CLI's argparse parser (:func:`pynumabind.cli._parser.build_parser`, loaded on call)."""
    from ._parser import build_parser as build

    return build(only)


def _check_system_weights(
    args: argparse.Namespace, environ: Optional[Mapping[str, str]] = None
) -> None:
    """``--set-system-weights`` writes requested weights: some must be given.

    A blank ``PYNUMABIND_WEIGHTS`` gives none: it is unset, by the one rule
    (:func:`pynumabind.options.environ_value`).
    """
    from ..discovery._environ import WEIGHTS_VARIABLE
    from ..options import environ_value

    env = os.environ if environ is None else environ
    given = args.weights is not None or environ_value(env, WEIGHTS_VARIABLE) is not None
    if args.set_system_weights and not given:
        raise UsageError(
            "--set-system-weights writes the requested weights as the kernel's: give them "
            f"(--weights NODE:WEIGHT,... or {WEIGHTS_VARIABLE}), with --policy weighted-interleave"
        )


# ------------------------------------------------------------------ helpers


def _configure_logging(verbosity: int, command: str) -> None:
    """The ``pynumabind`` logger to stderr for the command (:func:`._logs.configure`).

    A quiet ``exec`` (no ``-v``) where nothing has loaded ``logging`` sets it
    up only when a warning is about to be logged: the bind path logs through
    :class:`pynumabind._os.forksafe.Logger`, which drops what is below WARNING
    while ``logging`` is unloaded and loads it for a warning, and then runs
    this set-up first.  Every other command, and ``exec -v``, sets it up now.
    """
    if command == "exec" and verbosity <= 0 and "logging" not in sys.modules:
        forksafe.when_logging_loads(_quiet_logging)
        return
    from . import _logs

    _logs.configure(verbosity)


def _quiet_logging() -> None:
    from . import _logs

    _logs.configure(0)


def _option_list(value: Optional[str], option: str, *, nodes: bool) -> Optional[frozenset[int]]:
    if value is None:
        return None
    try:
        return parse_nodelist(value) if nodes else parse_cpulist(value)
    except ListParseError as exc:
        raise UsageError(f"{option}: {exc}") from None


def machine_topology(
    args: argparse.Namespace, *, bind_here: bool = False, visible_only: bool = True
) -> Topology:
    """The machine the command works on, with allowed-set overrides applied.

    ``bind_here`` (exec, check): a ``--topology`` file is this process on that
    machine, as ``PYNUMABIND_TOPOLOGY`` is (see ``resolve_topology``).
    """
    allowed_cpus = _option_list(args.allowed_cpus, "--allowed-cpus", nodes=False)
    allowed_mems = _option_list(args.allowed_mems, "--allowed-mems", nodes=True)
    if args.sysfs_root is not None and not os.path.isdir(args.sysfs_root):
        raise UsageError(f"--sysfs-root: {args.sysfs_root!r} is not a directory")
    # --topology ("" too: an unset variable must not mean "this machine"),
    # --sysfs-root, else PYNUMABIND_TOPOLOGY (the machine the library binds
    # for, so check spawns, and show and plan print, what its workers will
    # see), else this machine: decided in one place, for the library too.
    try:
        topology = discovery.resolve_topology(
            snapshot=args.topology,
            sysfs_root=args.sysfs_root,
            use_nvml=not args.no_nvml,
            bind_here=bind_here,
            visible_only=visible_only,
        )
    except TopologyError as exc:
        if args.sysfs_root is None or isinstance(exc, ConfigError):
            raise
        # A tree that is not a sysfs tree is a bad value, as a file that is not a
        # snapshot is (SnapshotFileError): a usage error naming the option.
        raise UsageError(
            f"--sysfs-root: {args.sysfs_root!r} is not a usable sysfs tree: {exc}"
        ) from exc
    changes: Dict[str, Any] = {}
    if allowed_cpus is not None:
        unknown = allowed_cpus - topology.online_cpus
        if unknown:
            raise UsageError(
                f"--allowed-cpus: CPUs {format_ids(unknown)} are not online on this machine "
                f"(online: {format_ids(topology.online_cpus)})"
            )
        changes["allowed_cpus"] = allowed_cpus
    if allowed_mems is not None:
        unknown = allowed_mems - frozenset(topology.nodes)
        if unknown:
            raise UsageError(
                f"--allowed-mems: nodes {format_ids(unknown)} do not exist "
                f"(nodes: {format_ids(frozenset(topology.nodes))})"
            )
        changes["allowed_mems"] = allowed_mems
    return topology.replace(**changes) if changes else topology


def _visibility(args: argparse.Namespace, topology: Topology, *, bind_here: bool) -> Optional[str]:
    """What was done with the visible-device variables, or None when none is set.

    A recorded machine planned as recorded (show and plan with ``--topology``,
    any command with ``--sysfs-root``) keeps all its GPUs: the variables name
    this machine's devices.  Everywhere else they were applied.
    """
    from ..discovery._visible import visibility_note

    if args.sysfs_root is not None:
        return visibility_note(topology, os.environ, applied=False, recorded_by="--sysfs-root")
    recorded = args.topology is not None and not bind_here
    by = "--topology" if recorded else None
    return visibility_note(topology, os.environ, applied=not recorded, recorded_by=by)


def _options(args: argparse.Namespace) -> Options:
    """The plan options given on the command line, validated once (:mod:`pynumabind.options`)."""
    return Options.from_arguments(
        rank=getattr(args, "rank", None),
        nprocs=getattr(args, "nprocs", None),
        mode=args.mode,
        policy=args.policy,
        nodes=args.nodes,
        cpus=args.cpus,
        fallback=getattr(args, "fallback", None),
        tiers=getattr(args, "tiers", None),
        interleave_nodes=getattr(args, "interleave_nodes", None),
        weights=getattr(args, "weights", None),
        flags=True,
    )


def _machine_given(args: argparse.Namespace) -> bool:
    """Whether the user described the machine; else workers detect it themselves."""
    given = (args.topology, args.sysfs_root, args.allowed_cpus, args.allowed_mems)
    return any(value is not None for value in given) or args.no_nvml


#: What the command wrote to stdout, while it holds warnings (see :class:`._logs.Held`).
_PRINTED: List[List[str]] = []


@contextlib.contextmanager
def _warnings_held() -> Iterator[None]:
    """Hold the command's warnings until its output is written (see :class:`._logs.Held`)."""
    from . import _logs

    printed: List[str] = []
    _PRINTED.append(printed)
    try:
        with _logs.warnings_held(printed):
            yield
    finally:
        _PRINTED.remove(printed)


def _write_stdout(text: str) -> None:
    if sys.stdout is None:  # started with fd 1 closed
        raise PynumabindError("standard output is closed")
    for printed in _PRINTED:
        printed.append(text)
    sys.stdout.write(text)


def _emit_json(document: Dict[str, Any]) -> None:
    import json  # not at the top: ``exec`` prints JSON only with --json

    _write_stdout(json.dumps({"schema": JSON_SCHEMA_VERSION, **document}, indent=2) + "\n")


def _emit(text: str) -> None:
    _write_stdout(text.rstrip("\n") + "\n")


def topology_warnings(topology: Topology) -> List[str]:
    """What a person should notice about this machine before binding on it."""
    warnings: List[str] = []
    for gpu in topology.gpus:
        if gpu.numa_node is None and not gpu.local_cpus:
            warnings.append(
                f"GPU {gpu.index} ({gpu.pci_bus_id}) has no known NUMA node "
                "(sysfs numa_node is -1); its ranks get no CPU binding"
            )
    for node in sorted(topology.nodes.values(), key=lambda n: n.id):
        if node.memory_only:
            warnings.append(
                f"node {node.id} has no CPUs (memory-only: GPU memory, HBM or CXL); "
                "ranks on it get CPUs from the nearest CPU node"
            )
    empty = _empty_nodes(topology)
    if empty:
        warnings.append(
            f"nodes {format_ids(empty)} have neither CPUs nor memory (placeholders, e.g. for "
            "GPU memory partitions); they are never planned on"
        )
    for note in topology.notes:
        if note not in warnings:
            warnings.append(note)
    return warnings


# ------------------------------------------------------------------ commands


def _empty_nodes(topology: Topology) -> frozenset[int]:
    """Nodes with neither CPUs nor memory (GB200 exposes dozens of these)."""
    return frozenset(n.id for n in topology.nodes.values() if not n.cpus and not n.has_memory)


def _node_kind(node: Any) -> str:
    """What a node holds: ``cpus+memory``, ``memory-only`` (GPU memory, HBM, CXL), ..."""
    if node.memory_only:
        return "memory-only"
    if node.cpus and node.has_memory:
        return "cpus+memory"
    return "cpus only" if node.cpus else "empty"


#: The node table's HMAT column, and the line under the table that says what it holds.
_HMAT_HEADER = "hmat read"
_HMAT_LEGEND = (
    "hmat read: the bandwidth and latency the firmware (HMAT) claims for reads of the node's "
    "memory from its nearest CPUs, not measured (pynumabind advise measures)"
)


def _access_cell(node: NumaNode) -> str:
    """A node's HMAT read figures, in the kernel's units (MB/s, ns); "-" where none."""
    access = node.access
    figures = [] if access is None else [
        f"{value} {unit}"
        for value, unit in ((access.read_bandwidth_mbs, "MB/s"), (access.read_latency_ns, "ns"))
        if value is not None
    ]  # fmt: skip
    return ", ".join(figures) or "-"


def _node_row(n: int, node: NumaNode, *, hmat: bool) -> List[str]:
    """One node's row of the node table; ``hmat``: with the HMAT column."""
    row = [
        str(n),
        format_cpulist(node.cpus) or "-",
        human_bytes(node.memory_total if node.has_memory else 0),
        human_bytes(node.memory_free if node.has_memory else 0),
        _node_kind(node),
        "-" if node.tier is None else str(node.tier),
    ]
    return [*row, _access_cell(node)] if hmat else row


def _node_tables(topology: Topology) -> List[str]:
    """The node table and the distances; an HMAT column where the firmware gave figures."""
    # Placeholder nodes would only widen the tables; the warnings list them.
    node_ids = sorted(set(topology.nodes) - _empty_nodes(topology)) or sorted(topology.nodes)
    hmat = any(topology.nodes[n].access is not None for n in node_ids)
    rows = [_node_row(n, topology.nodes[n], hmat=hmat) for n in node_ids]
    distance_rows = [
        [str(a)] + [str(topology.distance(a, b) or "-") for b in node_ids] for a in node_ids
    ]
    headers = ["node", "cpus", "memory", "free", "kind", "tier"]
    return [
        "NUMA nodes",
        table([*headers, _HMAT_HEADER] if hmat else headers, rows),
        *([_HMAT_LEGEND] if hmat else []),
        "",
        "Distances",
        table(["node", *[str(n) for n in node_ids]], distance_rows),
    ]


def _gpu_table(topology: Topology, *, verbose: int = 0) -> List[str]:
    if not topology.gpus:
        if topology.visibility:  # hidden by the variables: Warnings names them
            return ["GPUs: none visible: the visible-device variables hide every GPU"]
        told = (
            "what discovery tried (PCI, NVML, KFD) is logged on stderr"
            if verbose
            else "`pynumabind show -v` says what discovery tried (PCI, NVML, KFD) and why"
        )
        return [f"GPUs: none visible; {told}"]
    rows = [
        [
            str(g.index),
            g.pci_bus_id,
            g.model or g.vendor,
            "-" if g.numa_node is None else str(g.numa_node),
            format_cpulist(g.local_cpus) or "-",
            "-" if g.memory_node is None else str(g.memory_node),
            g.source,
        ]
        for g in topology.gpus
    ]
    headers = ["gpu", "pci bus id", "model", "node", "local cpus", "mem node", "source"]
    return ["GPUs (in this process's order)", table(headers, rows)]


def cmd_show(args: argparse.Namespace) -> int:
    topology = machine_topology(args)
    warnings = topology_warnings(topology)
    visibility = _visibility(args, topology, bind_here=False)
    if args.json:
        _emit_json({"topology": topology.to_dict(), "warnings": warnings, "visibility": visibility})
        return EXIT_OK
    allowed = [
        ["cpus", format_cpulist(topology.allowed_cpus) or "-"],
        ["mems", format_cpulist(topology.allowed_mems) or "-"],
    ]
    parts = [*_node_tables(topology), "", *_gpu_table(topology, verbose=args.verbose)]
    if visibility is not None:
        parts += ["", "Visible devices", f"  {visibility}"]
    parts += ["", "This process", table(["allowed", "set"], allowed)]
    if warnings:
        parts += ["", "Warnings", *[f"  - {w}" for w in warnings]]
    _emit("\n".join(parts))
    return EXIT_OK


def _gpu_cell(gpu: Optional[Gpu]) -> str:
    return "none" if gpu is None else f"{gpu.index} {gpu.pci_bus_id}"


def _plan_rows(
    results: Sequence[Union[Plan, PynumabindError]], gpus: Sequence[Optional[Gpu]] = ()
) -> List[List[str]]:
    """The table's rows; a rank that cannot be planned names its GPU (``gpus``) all the same."""
    rows = []
    for rank, plan in enumerate(results):
        if not isinstance(plan, Plan):
            gpu = _gpu_cell(gpus[rank]) if rank < len(gpus) else "-"
            rows.append([str(rank), gpu, "-", "error", "-", "-"])
            continue
        gpu = _gpu_cell(plan.gpu_info)
        rows.append(
            [
                str(plan.rank),
                gpu,
                "-" if plan.node is None else str(plan.node),
                "unbound" if plan.cpus is None else format_cpulist(plan.cpus),
                format_cpulist(plan.mems) or "-",
                plan.policy.value,
            ]
        )
    return rows


def cmd_plan(args: argparse.Namespace) -> int:
    """The per-rank table; a rank that cannot be planned shows its error, the others their plan."""
    from ..discovery._environ import resolve
    from ..planner import gpus_by_rank, plan_each_for

    # Flags win; PYNUMABIND_* and the launcher's process count fill the
    # rest, as they do for the workers that exec and check start.
    options = resolve(os.environ, _options(args), need_rank=False)
    topology = machine_topology(args)
    visibility = _visibility(args, topology, bind_here=False)
    advised = None
    if options.cpu_mode is CpuMode.ADVISED:  # what each worker will follow: the record
        from ..records.store import resolve_advised

        machine, name = _planned_machine(args)
        advised = resolve_advised(options, topology, machine=machine, machine_name=name)
        options, topology = advised.options, advised.topology
    results = plan_each_for(topology, options)
    if advised is not None:
        results = [advised.finish(r) if isinstance(r, Plan) else r for r in results]
    plans = [r for r in results if isinstance(r, Plan)]
    errors = [(rank, r) for rank, r in enumerate(results) if not isinstance(r, Plan)]
    if not plans:
        raise errors[0][1]  # no rank can be planned: the first error says why
    gpus = gpus_by_rank(topology, options) if errors else ()
    if args.json:
        _emit_json(
            {
                "ranks": [
                    r.to_dict() if isinstance(r, Plan) else {"rank": rank, "error": str(r)}
                    for rank, r in enumerate(results)
                ],
                "visibility": visibility,
            }
        )
    else:
        _emit("\n".join(_plan_text(results, visibility, gpus)))
    if errors:
        _error(f"{len(errors)} of {len(results)} ranks cannot be planned (see the table)")
        return EXIT_FAILURE
    return EXIT_OK


def _not_warned(reasons: Sequence[str], warnings: Sequence[str]) -> List[str]:
    """The reasons that are not also warnings: the Warnings section says those, once."""
    warned = set(warnings)
    return [r for r in reasons if r not in warned]


def _planned_machine(args: argparse.Namespace) -> Tuple[Any, Optional[str]]:
    """The fingerprint mode ``advised`` matches records with, and what messages call it.

    ``--topology`` or ``--sysfs-root``: another machine, whose record is the
    one to follow (its snapshot's fingerprint, every GPU it lists; see
    :mod:`pynumabind.records.store`); otherwise (None, None): this machine,
    as a worker here reads it (``PYNUMABIND_TOPOLOGY`` binds here).
    ``--allowed-cpus`` and ``--allowed-mems`` are checked, as every command
    checks them, but change no fingerprint: a record is of the machine.
    """
    if args.topology is None and args.sysfs_root is None:
        if args.allowed_cpus is not None or args.allowed_mems is not None:
            machine_topology(args)  # checked as every command checks them (a usage error)
        return None, None
    from ..records.store import snapshot_machine

    every_gpu = machine_topology(args, visible_only=False)
    if args.topology is not None:
        name = f"the machine of snapshot {args.topology}"
    else:
        name = f"the machine of sysfs tree {args.sysfs_root}"
    return snapshot_machine(every_gpu), name


def _plan_text(
    results: Sequence[Union[Plan, PynumabindError]],
    visibility: Optional[str] = None,
    gpus: Sequence[Optional[Gpu]] = (),
) -> List[str]:
    plans = [r for r in results if isinstance(r, Plan)]
    text = table(["rank", "gpu", "node", "cpus", "mems", "policy"], _plan_rows(results, gpus))
    notes = by_rank([(p.rank or 0, _not_warned(p.reasons, p.warnings)) for p in plans])
    warnings = by_rank([(p.rank or 0, p.warnings) for p in plans])
    errors = [
        f"  {r}" if str(r).startswith(f"rank {rank}:") else f"  rank {rank}: {r}"
        for rank, r in enumerate(results)
        if not isinstance(r, Plan)
    ]
    out = [text]
    if visibility is not None:
        out += ["", "Visible devices", f"  {visibility}"]
    if notes:
        out += ["", "Reasons", *notes]
    if warnings:
        out += ["", "Warnings", *warnings]
    if errors:
        out += ["", "Errors", *errors]
    return out


def cmd_exec(args: argparse.Namespace) -> int:
    from ..binding import bind_current_process

    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("exec needs a command: pynumabind exec [options] -- CMD [ARGS...]")
    if not argv[0]:  # checked before binding: execvp would refuse it only afterwards
        raise UsageError("exec: the command is an empty string")
    _check_system_weights(args)
    options = _options(args)
    topology = machine_topology(args, bind_here=True) if _machine_given(args) else None
    binding = bind_current_process(
        options=options,
        topology=topology,
        on_error=args.on_error,
        set_system_weights=args.set_system_weights,
    )
    if args.json and sys.stderr is not None:
        import json  # only here: the common ``exec`` prints no JSON

        # stdout belongs to the command; the report goes to stderr.
        sys.stderr.write(json.dumps({"schema": JSON_SCHEMA_VERSION, **binding.to_dict()}) + "\n")
    for stream in (sys.stdout, sys.stderr):  # None when started with it closed
        if stream is not None:
            stream.flush()
    try:
        os.execvp(argv[0], argv)  # noqa: S606 - no shell, by design
    except FileNotFoundError:
        _error(f"exec: command not found: {argv[0]}")
        return EXIT_NOT_FOUND
    except PermissionError:
        _error(f"exec: permission denied: {argv[0]}")
        return EXIT_NOT_EXECUTABLE
    except OSError as exc:
        _error(f"exec: cannot run {argv[0]}: {exc.strerror}")
        return EXIT_NOT_EXECUTABLE
    raise AssertionError("unreachable")  # pragma: no cover


_CHECK_HEADERS = [
    "rank", "gpu", "planned cpus", "bound cpus", "mems", "policy", "pages on", "result",
]  # fmt: skip
_CHECK_LEGEND = (
    "gpu: the GPU the rank drives (none: no GPU visible); pages on: the NUMA node(s) where "
    "pages the worker touched after binding landed (move_pages)"
)


def _check_rows(report: Any) -> List[List[str]]:
    return [
        [
            str(w.rank),
            w.gpu or "none",
            w.planned_cpus,
            w.bound_cpus,
            w.planned_mems or "-",
            w.policy,
            w.page_nodes or "-",
            "ok" if w.ok else "FAIL",
        ]
        for w in report.workers
    ]


def _count_source(options: Options) -> str:
    """Where the process count came from, as the user gave it: ``--nprocs`` or a variable."""
    source = options.nprocs_source
    return options.spelled("nprocs") if source in (None, "command line", "argument") else source


def _check_note(topology: Topology, options: Options, workers: int) -> Optional[str]:
    """One line on the most common first machine: no GPU, one NUMA node with CPUs."""
    if topology.gpus or len(topology.cpu_nodes) != 1:
        return None
    count = (
        "one worker per NUMA node with CPUs"
        if options.nprocs is None
        else f"{counted(workers, 'worker')} ({_count_source(options)})"
    )
    return (
        f"no GPU visible: {count}; this machine has one NUMA node, so binding changes "
        "nothing here beyond the CPUs each worker gets (`pynumabind advise` measures whether "
        "it would help)"
    )


def cmd_check(args: argparse.Namespace) -> int:
    from ..discovery._environ import resolve
    from ._check import run_check

    # As plan does: flags win, then PYNUMABIND_* and the launcher's process count.
    _check_system_weights(args)
    options = resolve(os.environ, _options(args), need_rank=False)
    topology = machine_topology(args, bind_here=True)
    visibility = _visibility(args, topology, bind_here=True)
    report = run_check(
        topology,
        options,
        timeout=args.timeout,
        pass_topology=_machine_given(args),
        set_system_weights=args.set_system_weights,
    )
    if args.json:
        _emit_json({**report.to_dict(), "visibility": visibility})
        return EXIT_OK if report.ok else EXIT_FAILURE
    notes = [n for n in (_check_note(topology, options, len(report.workers)), visibility) if n]
    _emit(_check_text(report, "\n".join(notes) or None, verbose=args.verbose))
    return EXIT_OK if report.ok else EXIT_FAILURE


def _check_text(report: Any, note: Optional[str], *, verbose: bool) -> str:
    """The check report as text: the table, the note, each section with lines, the count."""
    lines = [table(_CHECK_HEADERS, _check_rows(report)), _CHECK_LEGEND]
    if note is not None:
        lines += ["", note]
    for title, body in _check_sections(report.workers, verbose=verbose):
        if body:
            lines += ["", title, *body]
    ok = sum(w.ok for w in report.workers if not w.not_bound)
    on_purpose = sum(w.ok for w in report.workers if w.not_bound)
    count = f"{ok} of {len(report.workers)} workers bound as planned"
    if on_purpose:  # PYNUMABIND_DISABLE, or mode advised's record: a success, shown as such
        count += f", {on_purpose} not bound, on purpose"
    lines += ["", count]
    return "\n".join(lines)


def _check_sections(workers: Sequence[Any], *, verbose: bool) -> List[Tuple[str, List[str]]]:
    """The check report's sections, in order: a title and its lines (none: left out)."""
    reasons = by_rank([(w.rank, _not_warned(w.reasons, w.warnings)) for w in workers])
    reasons = reasons if verbose else []
    unbound = [f"  rank {w.rank}: {w.not_bound}" for w in workers if w.not_bound]
    problems = [
        f"  {p}" if p.startswith(f"rank {w.rank}:") else f"  rank {w.rank}: {p}"
        for w in workers
        for p in w.problems
    ]
    return [
        ("Reasons", reasons),
        ("Warnings", by_rank([(w.rank, w.warnings) for w in workers])),
        ("Not bound, on purpose", unbound),
        ("Problems", problems),
    ]


#: Errors opening ``-o FILE`` that say the name is wrong (a usage error, 2), not the machine.
_BAD_PATH_ERRNOS = frozenset({errno.EISDIR, errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG})


def _check_output(output: Optional[str]) -> None:
    """``snapshot -o FILE`` names a file that can be created: checked before discovery."""
    if output is None:
        return
    if not output:
        raise UsageError("snapshot -o: the file name is empty (omit -o to write to stdout)")
    if os.path.isdir(output):
        raise UsageError(f"snapshot -o: {output!r} is a directory; name the file to write")
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise UsageError(f"snapshot -o: {output!r}: the directory {parent!r} does not exist")


def cmd_snapshot(args: argparse.Namespace) -> int:
    _check_output(args.output)
    # Every GPU of the machine, not only those CUDA_VISIBLE_DEVICES shows: the
    # snapshot's users apply their own visibility to it, by physical index.
    topology = machine_topology(args, visible_only=False)
    text = topology.to_json() + "\n"
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            if exc.errno in _BAD_PATH_ERRNOS:  # the name, not the machine: as checked above
                raise UsageError(
                    f"snapshot -o: cannot write {args.output!r}: {exc.strerror}"
                ) from exc
            raise PynumabindError(f"cannot write {args.output!r}: {exc.strerror}") from exc
        _emit(
            f"wrote the topology ({counted(len(topology.nodes), 'NUMA node')}, "
            f"{counted(len(topology.gpus), 'GPU')}) "
            f"to {os.path.abspath(args.output)}; use it with --topology FILE"
        )
    else:
        _write_stdout(text)
    return EXIT_OK


def cmd_records(args: argparse.Namespace) -> int:
    """``records``: compared with this machine, or with a ``--topology`` snapshot's."""
    from ._records import cmd_records as records

    machine, name = _planned_machine(args)
    return records(args, machine, name)


def report_layout() -> Layout:
    """How show, plan and check print: the report writes its sections with them."""
    from ._report import Layout

    return Layout(
        node_tables=_node_tables,
        gpu_table=_gpu_table,
        warnings=topology_warnings,
        plan_text=_plan_text,
        check_text=lambda report, note: _check_text(report, note, verbose=True),
        check_note=_check_note,
    )


def cmd_report(args: argparse.Namespace) -> int:
    from ._report import cmd_report as report

    return report(args, report_layout())


def cmd_advise(args: argparse.Namespace) -> int:
    from ._advise import cmd_advise as advise

    return advise(args)


#: The commands whose output lists warnings: they print each once (see :class:`._logs.Held`).
#: Not exec (it becomes the command) nor advise (its progress is live).
_LISTING_WARNINGS = frozenset({"show", "plan", "check"})


COMMANDS = {
    "show": cmd_show,
    "plan": cmd_plan,
    "exec": cmd_exec,
    "check": cmd_check,
    "snapshot": cmd_snapshot,
    "advise": cmd_advise,
    "records": cmd_records,
    "report": cmd_report,
}


def _error(message: str) -> None:
    if sys.stderr is not None:  # started with fd 2 closed: the exit status must do
        sys.stderr.write(f"pynumabind: error: {message}\n")


def _names_a_missing_file(exc: BaseException) -> bool:
    """A topology file (``--topology``, ``PYNUMABIND_TOPOLOGY``) that does not exist.

    The one exit-status rule: a value naming something this machine lacks (a
    CPU, a node, a rank, a file) is a usage error, 2; a machine or process that
    cannot do what valid options ask is a failure, 1.
    """
    cause: Optional[BaseException] = exc
    while cause is not None:
        if isinstance(cause, FileNotFoundError):
            return isinstance(exc, TopologyError)
        cause = cause.__cause__
    return False


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the console script; returns the exit status.

    The ``pynumabind`` logger is set up for the command while it runs and put
    back as it was when it returns, so calling ``main`` from Python (a test, a
    doctest, a launcher) leaves the caller's logging alone.
    """
    if "logging" in sys.modules:
        from . import _logs

        saved = _logs.saved()
    else:  # nothing configured it: put it back as nothing had (see _configure_logging)
        saved = None
    try:
        return _main(argv)
    finally:
        forksafe.when_logging_loads(None)
        if "logging" in sys.modules:
            from . import _logs

            _logs.restore(_logs.UNCONFIGURED if saved is None else saved)


def _parse(words: Sequence[str]) -> argparse.Namespace:
    """The arguments: ``exec``'s usual line read without argparse (:mod:`._execline`), any
    other by argparse, every stray one named (``pynumabind --bogus`` once said only that a
    command was missing)."""
    usual = _execline.read(words)
    if usual is not None:
        return usual  # type: ignore[no-any-return]
    from ._parser import parser_for

    args, extras = parser_for(words).parse_known_args(words)
    commands = ", ".join(COMMANDS)
    if args.command is None:
        stray = f"unrecognized arguments: {' '.join(extras)}; " if extras else ""
        raise UsageError(
            f"{stray}a command comes first: pynumabind COMMAND [options] (commands: "
            f"{commands}; pynumabind --help lists them)"
        )
    if extras:
        raise UsageError(f"unrecognized arguments: {' '.join(extras)}")
    if args.command == "snapshot" and args.json:
        raise UsageError(
            "snapshot: --json is not an option here: a snapshot is JSON already (drop --json)"
        )
    return args


def _main(argv: Optional[Sequence[str]]) -> int:
    words = sys.argv[1:] if argv is None else argv
    if not words:
        # A bare `pynumabind`: what it can do, then the usage-error exit status.
        if sys.stderr is not None:
            sys.stderr.write(build_parser().format_help())
        return EXIT_USAGE
    try:
        args = _parse(words)
        _configure_logging(args.verbose, args.command)
        if args.command in _LISTING_WARNINGS:
            with _warnings_held():
                return COMMANDS[args.command](args)
        return COMMANDS[args.command](args)
    except UsageError as exc:
        _error(str(exc))
        return EXIT_USAGE
    except (ConfigError, ListParseError) as exc:
        _error(str(exc))
        return EXIT_USAGE
    except PynumabindError as exc:
        _error(str(exc))
        return EXIT_USAGE if _names_a_missing_file(exc) else EXIT_FAILURE
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        # `pynumabind show | head`: stop quietly, like other Unix tools.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_FAILURE
    except OSError as exc:
        _error(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
        return EXIT_FAILURE
