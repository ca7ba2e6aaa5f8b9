"""Child bodies around the CLI: commands ``pynumabind exec`` runs, and wrappers
that restrict a process before it execs the console script.

Run with ``childproc.child_command``; each prints (or returns) exactly what
its test reads from the child's output.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: the exec test counts typing among what exec loads
if TYPE_CHECKING:
    from typing import Any, Dict, List


def affinity_and_policy() -> Dict[str, Any]:
    """This process's CPUs and memory policy (after ``pynumabind exec`` bound it)."""
    from pynumabind._os import libnuma as _libnuma

    policy = _libnuma.get_mempolicy()
    return {
        "cpus": sorted(os.sched_getaffinity(0)),
        "mode": policy.mode,
        "nodes": sorted(policy.nodes),
    }


def write_ran(fd: str, word: str) -> None:
    """Write ``ran WORD`` to file descriptor ``fd`` (the standard stream left open)."""
    os.write(int(fd), b"ran " + word.encode())


def print_repr(argument: str) -> None:
    """Print the argument as received: how ``exec`` passed it on."""
    print(repr(argument))


def print_ran() -> None:
    print("ran")


def exec_with_syscalls_denied(denied: str, program: str, *args: str) -> None:
    """Deny the syscalls ``denied`` (comma-separated numbers) with EPERM, then exec ``program``.

    Start it with ``alarm=0``: the filter and the exec'd program are the point.
    """
    from ..support import seccomp_filter

    seccomp_filter.install(tuple(int(nr) for nr in denied.split(",")))
    os.execv(program, [program, *args])


def exec_when_told(program: str, *args: str) -> None:
    """Wait for a line on stdin (the parent moves us into a cgroup first), then exec."""
    sys.stdin.readline()
    os.execv(program, [program, *args])


def terminal_widths() -> List[int]:
    """The CLI's terminal width and shutil's, in this process's environment and terminal."""
    import shutil

    from pynumabind.cli._parser import terminal_columns

    return [terminal_columns(), shutil.get_terminal_size().columns]


def modules_exec_loads(*watched: str) -> List[str]:
    """The modules ``pynumabind exec --no-nvml --rank 0 -- true`` loads, up to its execvp.

    ``watched`` modules that a site hook loaded before (this machine's Python
    has one that loads ``typing`` and ``shutil``) are dropped from
    ``sys.modules`` first, so that an import of one by ``exec`` counts.
    ``os.execvp`` is replaced by a function that returns them: the process is
    not replaced.
    """
    for name in watched:
        sys.modules.pop(name, None)
    before = set(sys.modules)
    loaded: List[str] = []

    def execvp(file: str, args: List[str]) -> None:
        loaded.extend(sorted(set(sys.modules) - before))
        raise SystemExit(0)

    os.execvp = execvp  # type: ignore[assignment]
    from pynumabind.cli import main

    try:
        main(["exec", "--no-nvml", "--rank", "0", "--", "true"])
    except SystemExit:
        pass
    return loaded


def quiet_exec_that_warns() -> Dict[str, Any]:
    """A quiet ``exec`` whose bind path logs a warning, then cannot run its command.

    ``logging`` is dropped from ``sys.modules`` first where a site hook loaded
    it: a quiet ``exec`` sets up the CLI's handler only when a warning comes
    (``pynumabind.cli._configure_logging``), and that is what is checked.
    ``os.execvp`` logs the warning through the bind path's logger, then fails
    as for a missing program.  Returns the exit status and the ``pynumabind``
    logger as ``main`` left it.
    """
    sys.modules.pop("logging", None)
    from pynumabind._os import forksafe

    def execvp(file: str, args: List[str]) -> None:
        forksafe.Logger("pynumabind.binding").warning("pynumabind: %s", "a late warning")
        raise FileNotFoundError(2, "No such file or directory", file)

    os.execvp = execvp  # type: ignore[assignment]
    from pynumabind.cli import main

    status = main(["exec", "--no-nvml", "--rank", "0", "--", "no-such-program"])
    import logging

    logger = logging.getLogger("pynumabind")
    return {
        "status": status,
        "handlers": len(logger.handlers),
        "level": logger.level,
        "propagate": logger.propagate,
    }
