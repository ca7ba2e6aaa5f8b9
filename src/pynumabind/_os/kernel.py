"""The kernel's machine-wide settings that change where memory ends up (shell).

``pynumabind report`` notes them; no bind reads them:

* automatic NUMA balancing (``/proc/sys/kernel/numa_balancing``): when on,
  the kernel migrates pages towards the CPUs that touch them, so pages a
  worker placed may move later (``0`` off, ``1`` on; ``2`` and ``3`` are the
  memory-tiering modes of newer kernels);
* transparent huge pages (``/sys/kernel/mm/transparent_hugepage/enabled``
  and ``defrag``): the setting in brackets (``always [madvise] never``);
* the kernel's release and version (``uname``).

Each file is optional: a kernel without it (no NUMA balancing built in, no
THP) gives ``None``; a file that exists but cannot be read gives ``None``
and the reason, never an exception.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional, Tuple

from ..errors import TopologyError
from . import PROC_ROOT, SYSFS_ROOT
from .textfile import read_ascii

__all__ = ["NUMA_BALANCING", "THP_DEFRAG", "THP_ENABLED", "KernelSettings", "bracketed", "settings"]

NUMA_BALANCING = f"{PROC_ROOT}/sys/kernel/numa_balancing"
THP_ENABLED = f"{SYSFS_ROOT}/kernel/mm/transparent_hugepage/enabled"
THP_DEFRAG = f"{SYSFS_ROOT}/kernel/mm/transparent_hugepage/defrag"

#: What each ``numa_balancing`` value means.
BALANCING_MODES = {
    "0": "off",
    "1": "on",
    "2": "memory tiering only",
    "3": "on, and memory tiering",
}


@dataclass(frozen=True)
class KernelSettings:
    """The settings, each ``None`` when the kernel does not show it (``problems`` say why)."""

    release: str
    version: str
    machine: str
    numa_balancing: Optional[str] = None
    thp_enabled: Optional[str] = None
    thp_defrag: Optional[str] = None
    problems: Tuple[str, ...] = ()


def bracketed(text: str) -> str:
    """The chosen word of a sysfs choice list: ``madvise`` of ``always [madvise] never``."""
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return text.strip()


def _balancing(value: str) -> str:
    """``off (0)``: what a ``numa_balancing`` value means, and the value."""
    return f"{BALANCING_MODES.get(value, 'unknown')} ({value})"


def _read(path: str, problems: List[str]) -> Optional[str]:
    try:
        return read_ascii(path, "kernel setting").strip()
    except FileNotFoundError:
        return None
    except (OSError, TopologyError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        problems.append(f"cannot read {path}: {reason}")
        return None


def settings() -> KernelSettings:
    """The running kernel's settings (see the module docstring)."""
    problems: List[str] = []
    balancing = _read(NUMA_BALANCING, problems)
    enabled = _read(THP_ENABLED, problems)
    defrag = _read(THP_DEFRAG, problems)
    uname = os.uname()
    return KernelSettings(
        release=uname.release,
        version=uname.version,
        machine=uname.machine,
        numa_balancing=None if balancing is None else _balancing(balancing),
        thp_enabled=None if enabled is None else bracketed(enabled),
        thp_defrag=None if defrag is None else bracketed(defrag),
        problems=tuple(problems),
    )
