"""``pynumabind report [-o FILE] [--json] [--redact] [--no-advise] [--no-check] [--no-nvml]``.

One command a user runs on their GPU machine, whose output answers "is
pynumabind right here?" and can be attached to a bug report.  It holds, in
this order (:data:`._document.SECTIONS`): the versions (pynumabind, Python,
the kernel, libnuma, nvidia-ml-py, the NVIDIA driver, the CUDA runtime when
it loads without torch); the machine as discovery sees it, with each source
and why it was used or not; every visibility, ``PYNUMABIND_*`` and launcher
variable; this process's affinity, cgroup, cpuset and device limits; the
kernel's NUMA balancing and transparent huge pages; each local rank's plan
(and mode ``advised``'s, when an advice record exists); ``nvidia-smi topo
-m``; a real ``pynumabind check`` run; ``pynumabind advise --quick``; and
what the library logged meanwhile.  At the top, the cross-checks
(:mod:`._checks`), each with its verdict.

The modules:

* :mod:`._document` -- the values: sections, cross-checks, the JSON form and
  the exit status (pure);
* :mod:`._checks` -- the cross-checks (pure);
* :mod:`._gather` -- reading each section, a failure kept in its section;
* :mod:`._text` -- the text form, at most 100 columns (pure);
* :mod:`._redact` -- ``--redact`` (pure);
* :mod:`._layout` -- :class:`Layout`, what the CLI hands in.

This module holds the command (its options, the ``-o`` file, the exit
status) and imports the others only when it runs, so that importing the
CLI loads none of them but :mod:`._layout`.

Exit status: 0 when no cross-check disagrees and every section and
cross-check was made; 1 when a cross-check disagrees, or a section or a
cross-check failed (the report still comes out, saying which); 2 for a
usage error (``-o`` naming a directory, a file that cannot be written, a
bad option): checked before anything runs, since the report takes about
20 s.  Never a traceback on the terminal: a section's or a cross-check's
traceback goes into the report.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional

from ...errors import ConfigError, PynumabindError
from ._layout import Layout

__all__ = ["Layout", "add_parser", "cmd_report"]

#: The sysfs the command reads: the live one (tests point it at a recorded machine).
SYSFS_ROOT: Optional[str] = None


def add_parser(commands: Any) -> None:
    """Add the ``report`` subcommand to the CLI's subparsers."""
    report = commands.add_parser(
        "report",
        help="everything pynumabind sees and does on this machine, cross-checked, in one "
        "file to attach to a bug report",
        description="Write a report of this machine for a bug report: versions, the machine as "
        "discovery sees it and why, environment variables, limits, plans, a check run, advise "
        "--quick, and cross-checks (NVML against sysfs, CUDA's GPU order, nvidia-smi topo -m) "
        "each with a verdict. Exit status 0: everything agrees; 1: a cross-check disagrees or "
        "a section failed; 2: usage error. Example: pynumabind report -o report.txt",
    )
    report.add_argument(
        "-o", "--output", metavar="FILE", help="write the report to FILE instead of standard output"
    )
    report.add_argument("--json", action="store_true", help="write JSON instead of text")
    report.add_argument(
        "--redact",
        action="store_true",
        help="replace host names, UUIDs and serials (and the home directory) with placeholders; "
        "PCI bus ids stay (they are topology)",
    )
    report.add_argument(
        "--no-advise",
        action="store_true",
        help="do not run advise --quick (about 15 s): a faster report",
    )
    report.add_argument(
        "--no-check", action="store_true", help="do not start check's worker processes"
    )
    report.add_argument(
        "--no-nvml", action="store_true", help="do not ask NVML (discovery as with --no-nvml)"
    )
    report.add_argument(
        "-v", "--verbose", action="count", default=0, help="log more (repeat for debug)"
    )


def _writable_target(path: Optional[str]) -> Optional[str]:
    """``-o``'s file, checked before the report runs; a ConfigError (exit 2) says what is wrong."""
    if path is None:
        return None
    if not path:
        raise ConfigError("report -o: the file name is empty (omit -o to write to stdout)")
    if os.path.isdir(path):
        raise ConfigError(f"report -o: {path!r} is a directory; name a file in it")
    existed = os.path.lexists(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise ConfigError(f"report -o: cannot write {path!r}: {exc.strerror or exc}") from None
    os.close(fd)
    if not existed:
        try:
            os.unlink(path)
        except OSError:
            pass
    return os.path.abspath(path)


def _progress(line: str) -> None:
    if sys.stderr is not None:
        sys.stderr.write(f"pynumabind report: {line}\n")
        sys.stderr.flush()


def cmd_report(args: argparse.Namespace, layout: Layout) -> int:
    """Make the report, write it, and return its exit status (0 or 1).

    ``layout``: the CLI's own writers of what ``show``, ``plan`` and ``check``
    print (:class:`Layout`).
    """
    import json  # here, not at the top: ``exec`` loads this module for its parser only
    from dataclasses import replace

    from ...model import SCHEMA_VERSION
    from ._gather import Settings, build_report, redact
    from ._text import render, summary

    target = _writable_target(args.output)
    settings = Settings(
        use_nvml=not args.no_nvml,
        check=not args.no_check,
        advise=not args.no_advise,
        progress=_progress,
    )
    if SYSFS_ROOT is not None:
        settings = replace(settings, sysfs_root=SYSFS_ROOT)
    report = build_report(settings, layout)
    if args.redact:
        report = redact(report)
    if args.json:
        text = json.dumps(report.to_dict(SCHEMA_VERSION), indent=2, default=str) + "\n"
    else:
        text = render(report)
    if target is None:
        if sys.stdout is None:
            raise PynumabindError("standard output is closed")
        sys.stdout.write(text)
        sys.stdout.flush()
        return report.exit_status
    try:
        with open(target, "w", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(text)
    except OSError as exc:
        raise PynumabindError(f"report -o: cannot write {target!r}: {exc.strerror}") from exc
    if sys.stdout is not None:
        sys.stdout.write(f"wrote the report to {target}\n" + "\n".join(summary(report)) + "\n")
    return report.exit_status
