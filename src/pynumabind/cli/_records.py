"""``pynumabind records [PATH] [--json]``: what a place of advice records holds.

One row per record file: the file, the machine it was measured on (CPU
model, NUMA nodes, GPUs), its advice, when it was saved, its kernel, and
what it is to this machine -- the one this machine follows (marked ``*``),
another machine's (with the first difference), or a file that cannot be read
as a record (with the reason).  With ``--topology FILE`` or ``--sysfs-root
DIR``, the machine compared is that snapshot's, as ``plan --topology FILE
--mode advised`` compares it (:func:`pynumabind.records.store.snapshot_machine`:
no CPU model or kernel to compare).  PATH is a record file or a directory of
records by the path rule (:mod:`pynumabind.records._paths`); without it, the
places the rule names (``PYNUMABIND_ADVICE``, else the per-user and the
system-wide directories, those that exist), as a worker looks at them.

The listing is :func:`pynumabind.records.store.list_records`: it reads
(bounded) and writes nothing.  Exit status 0 when the place could be read,
whatever it holds (an empty directory included); 2 when it cannot: missing,
not a directory nor a record, unreadable (one error line, never a
traceback).  Text that comes from the files -- names, CPU models, kernels,
verdicts -- is printed with control characters escaped.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List, Optional, Sequence

from .._text import clipped, counted, escaped, table
from ..errors import PynumabindError
from ..model import SCHEMA_VERSION

__all__ = ["add_parser", "cmd_records"]

_MARK = "*"


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``records`` subcommand to the CLI's subparsers (``common``: the machine options)."""
    records = commands.add_parser(
        "records",
        parents=[common],
        help="list the advice records a file or directory holds, marking the one this "
        "machine (or a --topology snapshot's) follows",
    )
    records.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help="a record file or a directory of records (default: $PYNUMABIND_ADVICE, else "
        "~/.cache/pynumabind/ and /var/lib/pynumabind/)",
    )


def _advice(entry: Any) -> str:
    rec = entry.record.advice.recommendation
    return f"bind: {rec.mode}, {rec.policy}" if rec.bind else "do not bind"


def _status(entry: Any, followed: Any, machine: str) -> str:
    """What the record is to the machine compared."""
    if entry.record is None:  # the message names the file by its path: the row has it
        return f"cannot be read: {(entry.problem or '').replace(entry.path, entry.name)}"
    if entry is followed:
        return f"followed by {machine}"
    if entry.matches:
        return f"of {machine} too; {followed.name if followed else 'another'} is followed"
    first, *more = entry.differences
    return f"another machine: {first}" + (f" (and {len(more)} more)" if more else "")


def _row(entry: Any, followed: Any, machine: str) -> List[str]:
    mark = _MARK if entry is followed else " "
    name = f"{mark} {escaped(entry.name)}"
    status = clipped(escaped(_status(entry, followed, machine)), 160)
    if entry.record is None:
        return [name, "-", "-", "-", "-", status]
    recorded = entry.record.machine
    return [
        name,
        clipped(escaped(recorded.hardware()), 60),
        _advice(entry),
        escaped(entry.record.saved),
        escaped(recorded.kernel or "-"),
        status,
    ]


def _listing_text(listing: Any, machine: str) -> List[str]:
    kind = "directory" if listing.directory else "record file"
    held = counted(len(listing.entries), "file")
    lines = [f"{escaped(listing.path)} ({kind}): {held}"]
    if listing.entries:
        headers = ["  file", "machine", "advice", "saved", "kernel", "here"]
        rows = [_row(e, listing.followed, machine) for e in listing.entries]
        lines.append(table(headers, rows))
    if listing.not_read:
        lines.append(f"({listing.not_read} more not read: at most the first records by name are)")
    return lines


def _text(listings: Sequence[Any], machine: str) -> str:
    lines: List[str] = []
    followed = None
    for listing in listings:
        if lines:
            lines.append("")
        lines += _listing_text(listing, machine)
        followed = followed or listing.followed
    lines.append("")
    if followed is not None:
        lines.append(f"{_MARK} {machine} follows {escaped(followed.path)}")
    else:
        lines.append(
            f"{machine} follows none of them: mode advised warns and plans the default mode "
            f"(run `pynumabind advise --save` on {machine})"
        )
    return "\n".join(lines)


def _entry_dict(entry: Any, followed: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = {
        "file": entry.name,
        "path": entry.path,
        "status": (
            "unreadable"
            if entry.record is None
            else "followed"
            if entry is followed
            else "matches"
            if entry.matches
            else "other machine"
        ),
        "reason": entry.problem,
        "differences": list(entry.differences),
    }
    if entry.record is not None:
        machine, rec = entry.record.machine, entry.record.advice.recommendation
        out["machine"] = {
            "cpu_model": machine.cpu_model,
            "nodes": len(machine.nodes),
            "gpus": len(machine.gpus),
            "kernel": machine.kernel,
        }
        out.update(
            bind=rec.bind,
            mode=rec.mode,
            policy=rec.policy,
            verdict=rec.verdict,
            saved=entry.record.saved,
            pynumabind=entry.record.version,
        )
    return out


def _document(listings: Sequence[Any]) -> Dict[str, Any]:
    follows: Optional[str] = None
    places = []
    for listing in listings:
        if listing.followed is not None and follows is None:
            follows = listing.followed.path
        places.append(
            {
                "path": listing.path,
                "directory": listing.directory,
                "not_read": listing.not_read,
                "records": [_entry_dict(e, listing.followed) for e in listing.entries],
            }
        )
    return {"schema": SCHEMA_VERSION, "follows": follows, "places": places}


def cmd_records(
    args: argparse.Namespace, machine: Any = None, machine_name: Optional[str] = None
) -> int:
    """List the place(s); an AdviceRecordError (exit 2) when the place cannot be read.

    ``machine``: the fingerprint compared (default: this machine's), and
    ``machine_name`` what the output calls it (the CLI passes a
    ``--topology`` snapshot's).
    """
    import json  # here: every command loads this module for its parser, ``exec`` too

    from ..records.store import list_records, this_machine

    name = "this machine" if machine_name is None else escaped(machine_name)
    listings = list_records(args.path, machine=this_machine() if machine is None else machine)
    if sys.stdout is None:
        raise PynumabindError("standard output is closed")
    if args.json:
        sys.stdout.write(json.dumps(_document(listings), indent=2) + "\n")
    else:
        sys.stdout.write(_text(listings, name) + "\n")
    return 0
