"""The CPU as ``/proc/cpuinfo`` describes it: its model, and whether a hypervisor runs it (shell).

The one reader of the file, for the advice record's machine fingerprint (the
CPU model) and ``advise``'s note on virtual machines (the ``hypervisor``
flag).  Only the first CPU's entry is read -- every fact taken here is on
it, and the whole file grows with the CPU count -- and never more than
:data:`ENTRY_BYTES` of it, nor more than :data:`ENTRY_LINES` lines.

Errors, translated here once: every fact is optional, so a file that cannot
be read (or is not a regular file) gives ``None`` or ``False``, never an
exception.  The live machine's file is the default; tests name another.
"""

from __future__ import annotations

from typing import Dict, Optional

from ..errors import TopologyError
from . import PROC_ROOT
from .textfile import read_head

__all__ = ["ENTRY_BYTES", "ENTRY_LINES", "PROC_CPUINFO", "cpu_model", "first_entry", "hypervisor"]

#: The live machine's CPU descriptions.
PROC_CPUINFO = f"{PROC_ROOT}/cpuinfo"

#: Bytes read at most: a first entry holds a few dozen lines (x86's flags
#: line is the longest, under 2 KiB).
ENTRY_BYTES = 64 << 10

#: Lines of the first entry kept at most.
ENTRY_LINES = 64

#: Characters kept of the model's name.
MODEL_CHARS = 200


def first_entry(path: str = PROC_CPUINFO) -> Optional[Dict[str, str]]:
    """The first CPU's ``key : value`` lines, keys in lower case; None when unreadable.

    The entry ends at the first blank line; a key given twice keeps its
    first value.
    """
    try:
        text = read_head(path, ENTRY_BYTES, "cpuinfo file")
    except (OSError, TopologyError):
        return None
    found: Dict[str, str] = {}
    for line in text.splitlines()[:ENTRY_LINES]:
        key, sep, value = line.partition(":")
        if sep:
            found.setdefault(key.strip().lower(), value.strip())
    return found


def cpu_model(path: str = PROC_CPUINFO) -> Optional[str]:
    """The CPU model: ``model name`` (x86), else ``CPU implementer``/``CPU part`` (Arm).

    ``None`` when the file cannot be read or names no model.
    """
    found = {k: v[:MODEL_CHARS] for k, v in (first_entry(path) or {}).items()}
    if found.get("model name"):
        return found["model name"]
    if "cpu implementer" in found and "cpu part" in found:
        return f"CPU implementer {found['cpu implementer']} part {found['cpu part']}"
    return None


def hypervisor(path: str = PROC_CPUINFO) -> bool:
    """Whether the CPU reports the ``hypervisor`` flag (x86: this is a virtual machine)."""
    found = first_entry(path) or {}
    return "hypervisor" in found.get("flags", "").split()
