"""What a child process reads back about itself from /proc (for the child bodies)."""

from __future__ import annotations

import os
from typing import Dict, Optional


def cpus_allowed(path: str = "/proc/self/status") -> Optional[str]:
    """The ``Cpus_allowed_list`` of a status file (this process by default)."""
    with open(path) as handle:
        for line in handle:
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    return None


def thread_cpus(tid: int) -> Optional[str]:
    """The ``Cpus_allowed_list`` of one thread of this process."""
    return cpus_allowed(f"/proc/self/task/{tid}/status")


def task_cpus() -> Dict[int, Optional[str]]:
    """Every live thread's ``Cpus_allowed_list``, by thread id."""
    out: Dict[int, Optional[str]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            out[int(tid)] = thread_cpus(int(tid))
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that just exited (join() returns slightly early)
    return out
