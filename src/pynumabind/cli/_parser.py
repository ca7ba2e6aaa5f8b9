"""The command line's argparse parser: every command's options, help and messages.

Kept apart from :mod:`pynumabind.cli` so that a command line that needs no
parser loads no argparse: ``exec``'s usual line is read by
:mod:`pynumabind.cli._execline`, which answers exactly as this parser does
or not at all.  The choices of ``--fallback``, ``--tiers`` and ``--on-error`` are
:mod:`pynumabind.options`' lists, which that module reads too.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from .._os import SYSFS_ROOT
from .._version import __version__
from ..model import CpuMode, MemoryPolicy
from ..options import FALLBACKS, ON_ERROR_CHOICES, TIERS
from ._usage import UsageError

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, NoReturn, Optional, Sequence

__all__ = ["EXAMPLES", "build_parser", "parser_for", "terminal_columns"]


def terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``, the width argparse wraps help to, without shutil.

    The same rule: a positive ``COLUMNS`` wins; else standard output's
    terminal, when it is one; else 80.  argparse imports ``shutil`` (with
    ``bz2``, ``lzma`` and ``fnmatch``) for this alone, each time it makes a
    formatter -- and ``add_argument`` makes one -- which would add about 2 ms
    to every ``pynumabind exec``.
    """
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):  # no stdout (None), not a terminal
        columns = 0
    return columns or 80


class _Help(argparse.HelpFormatter):
    """argparse's formatter, told its width (:func:`terminal_columns`, less 2, as it does)."""

    def __init__(self, prog: str, *args: Any, **kwargs: Any) -> None:
        if not args[2:] and kwargs.get("width") is None:
            kwargs["width"] = terminal_columns() - 2
        super().__init__(prog, *args, **kwargs)


class _RawHelp(_Help, argparse.RawDescriptionHelpFormatter):
    """:class:`_Help` that keeps the description's and the epilog's lines as written."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so main() owns the exit code."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


# ------------------------------------------------------------------ parsing


def _common_options(*, json_output: bool = True) -> _Parser:
    """The options every command but advise takes; ``json_output``: with ``--json``."""
    common = _Parser(add_help=False)
    source = common.add_argument_group("machine")
    where = source.add_mutually_exclusive_group()
    where.add_argument(
        "--topology",
        metavar="FILE",
        help="the machine in this snapshot (JSON): show and plan take it as recorded "
        "(another machine); exec and check bind here, so they take this process's "
        "allowed CPUs, memory nodes and visible GPUs on it, as PYNUMABIND_TOPOLOGY does",
    )
    where.add_argument(
        "--sysfs-root",
        metavar="DIR",
        help=f"read the machine from this directory instead of {SYSFS_ROOT}",
    )
    source.add_argument(
        "--allowed-cpus",
        metavar="LIST",
        help="CPUs the process may use (default: this process's, or all online on another machine)",
    )
    source.add_argument(
        "--allowed-mems",
        metavar="LIST",
        help="memory nodes the process may use (default: as for --allowed-cpus)",
    )
    source.add_argument(
        "--no-nvml", action="store_true", help="do not ask NVML (use sysfs PCI scanning only)"
    )
    if json_output:
        common.add_argument("--json", action="store_true", help="print JSON instead of tables")
    else:  # snapshot: its output is JSON already; --json is refused, not ignored
        common.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    common.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log more: -v says what discovery tried (sysfs, NVML, KFD), -vv each source's details",
    )
    return common


def _plan_options(parser: argparse.ArgumentParser, *, with_nprocs: bool = True) -> None:
    group = parser.add_argument_group("plan")
    if with_nprocs:
        group.add_argument(
            "--nprocs",
            type=int,
            metavar="N",
            help="local processes (default: visible GPUs, or NUMA nodes with CPUs)",
        )
    group.add_argument(
        "--mode",
        type=str.lower,  # names are case-insensitive everywhere
        choices=[m.value for m in CpuMode],
        metavar="MODE",
        help="how CPUs are chosen: %(choices)s (default: node)",
    )
    group.add_argument(
        "--policy",
        type=str.lower,
        choices=[p.value for p in MemoryPolicy],
        metavar="POLICY",
        help="memory policy: %(choices)s (default: preferred)",
    )
    group.add_argument(
        "--nodes", metavar="LIST", help='per-rank NUMA node override, e.g. "0,0,1,1"'
    )
    group.add_argument(
        "--cpus", metavar="LISTS", help='per-rank CPU lists, e.g. "0-15;16-31" (ranks split by ;)'
    )
    group.add_argument(
        "--fallback",
        type=str.lower,
        choices=list(FALLBACKS),
        metavar="ACTION",
        help="a rank whose GPU's node has no allowed CPU (cpuset): %(choices)s "
        "(default: error; nearest binds it to the nearest node with allowed CPUs)",
    )
    group.add_argument(
        "--tiers",
        type=str.lower,
        choices=list(TIERS),
        metavar="SCOPE",
        help="the memory tiers a rank's memory spreads over: %(choices)s (default: local); "
        "all: weighted interleave over each rank's own nodes and the nearest slower memory "
        "tier's memory-only nodes",
    )
    group.add_argument(
        "--interleave-nodes",
        metavar="LIST",
        help="the nodes --policy interleave or weighted-interleave spreads pages over, for "
        'every rank, e.g. "0,2" (default: each rank\'s own nodes)',
    )
    group.add_argument(
        "--weights",
        metavar="LIST",
        help="--policy weighted-interleave: NODE:WEIGHT items, a weight (1-255) per node, "
        'e.g. "0:3,2:1"; the nodes are these (default: the kernel\'s system-wide weights, '
        "which a process's policy follows; a bind says so when they differ from these)",
    )


_MAX_TIMEOUT = 1e6  # seconds; larger values overflow the poll() the check waits in


def _system_weights_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set-system-weights",
        action="store_true",
        help="write --weights as the kernel's system-wide weighted-interleave weights "
        "(root; it changes every process on the machine, and stays after the command)",
    )


def _timeout_seconds(text: str) -> float:
    """A positive, finite ``--timeout``: inf, nan and huge values crash poll()."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= _MAX_TIMEOUT:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds above 0 and at most {_MAX_TIMEOUT:g}"
        )
    return value


#: The top-level help's examples (its epilog).
EXAMPLES = """\
examples:
  pynumabind check                     bind one worker per GPU (or NUMA node), verify each
  pynumabind show -v                   this machine, and what discovery tried to find GPUs
  pynumabind plan --nprocs 8           each rank's CPUs, memory nodes and why
  pynumabind exec --nodes 1 -- CMD     run CMD on node 1's CPUs and memory (as numactl)
  pynumabind advise --quick            measure whether binding helps on this machine

'pynumabind COMMAND --help' describes each command's options.
"""


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The CLI's parser; ``only``: with that command's subparser alone.

    :func:`pynumabind.cli.main` asks for ``only`` the command named first:
    the other commands' options are never parsed then, and their modules
    (``advise``'s, ``records``', the report's) stay unloaded.  What such a parser accepts, and
    every message and help text it prints, is the full parser's.
    """
    parser = _Parser(
        prog="pynumabind",
        description="Bind GPU workers' CPUs and memory to the right NUMA node, in-process.",
        epilog=EXAMPLES,
        formatter_class=_RawHelp,
    )
    parser.add_argument("--version", action="version", version=f"pynumabind {__version__}")
    # Not required here: _main names a stray argument before it says a command is missing.
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    common = _common_options()
    for name, add in _SUBPARSERS.items():
        if only is None or name == only:
            add(commands, common)
    return parser


def _add_show(commands: Any, common: argparse.ArgumentParser) -> None:
    commands.add_parser(
        "show",
        parents=[common],
        help="show NUMA nodes, GPUs and this process's allowed sets",
        description="Show this machine (or a recorded one) as pynumabind sees it: NUMA nodes "
        "with their CPUs, memory and distances, the GPUs this process sees with their nodes, "
        "and this process's allowed CPUs and memory nodes, with warnings.",
    )


def _add_plan(commands: Any, common: argparse.ArgumentParser) -> None:
    plan = commands.add_parser(
        "plan",
        parents=[common],
        help="print the per-rank plan",
        description="Print each local rank's plan -- its GPU, node, CPUs, memory nodes and "
        "policy -- and the reasons for it, without binding anything.",
    )
    _plan_options(plan)


def _add_exec(commands: Any, common: argparse.ArgumentParser) -> None:
    exec_ = commands.add_parser(
        "exec",
        parents=[common],
        help="bind this process, then exec a command (replaces numactl wrappers)",
        description="Bind this process as planned, then replace it with CMD (execvp, no "
        "shell), which inherits the CPUs and the memory policy: what numactl does.",
    )
    exec_.add_argument(
        "--rank",
        type=int,
        metavar="N",
        help="local rank (default: LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID). "
        "Not needed when --nodes or --cpus gives one placement (as numactl), nor when this "
        "process sees GPUs (it is bound to them); needed to choose among several placements",
    )
    _plan_options(exec_)
    _system_weights_option(exec_)
    exec_.add_argument(
        "--on-error",
        choices=list(ON_ERROR_CHOICES),
        default="raise",
        metavar="ACTION",
        help="if the memory policy cannot be applied: warn (bind CPUs only, as the library's "
        "default does) or raise (run nothing). Default: raise, unlike the library: exec "
        "replaces itself with the command, so a warning would scroll past unread and the "
        "command would run half-bound",
    )
    exec_.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")


def _add_check(commands: Any, common: argparse.ArgumentParser) -> None:
    check = commands.add_parser(
        "check",
        parents=[common],
        help="spawn workers, bind and verify each, print a report",
        description="Start one fresh worker process per local rank; each binds itself as a "
        "real worker would and verifies the result (every thread's CPUs, the memory policy, "
        "where new pages land). Exit 0 when every worker is bound as planned or left "
        "unbound on purpose.",
    )
    _plan_options(check)
    _system_weights_option(check)
    check.add_argument(
        "--timeout",
        type=_timeout_seconds,
        default=60.0,
        metavar="SECONDS",
        help="seconds to wait for the workers (default: 60)",
    )


def _add_snapshot(commands: Any, common: argparse.ArgumentParser) -> None:
    snapshot = commands.add_parser(
        "snapshot",
        parents=[_common_options(json_output=False)],
        help="write the topology as JSON (for --topology)",
        description="Record this machine as a JSON snapshot -- every GPU, whatever "
        "CUDA_VISIBLE_DEVICES says -- for 'plan --topology FILE' here or anywhere else. "
        "The output is JSON always.",
    )
    snapshot.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE instead of standard output"
    )


def _add_advise(commands: Any, common: argparse.ArgumentParser) -> None:
    from ._advise import add_parser

    add_parser(commands)


def _add_records(commands: Any, common: argparse.ArgumentParser) -> None:
    from ._records import add_parser

    add_parser(commands, common)


def _add_report(commands: Any, common: argparse.ArgumentParser) -> None:
    from ._report import add_parser

    add_parser(commands)


#: Each command's subparser, in the order ``--help`` lists them
#: (:data:`pynumabind.cli.COMMANDS`' order).
_SUBPARSERS = {
    "show": _add_show,
    "plan": _add_plan,
    "exec": _add_exec,
    "check": _add_check,
    "snapshot": _add_snapshot,
    "advise": _add_advise,
    "records": _add_records,
    "report": _add_report,
}


def parser_for(words: Sequence[str]) -> argparse.ArgumentParser:
    """The parser for ``words``: a command named first is all it needs (see build_parser)."""
    return build_parser(words[0] if words and words[0] in _SUBPARSERS else None)
