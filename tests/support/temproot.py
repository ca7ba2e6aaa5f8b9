"""Where the suite's temporary directories may go: a tmpfs with room (tests/conftest.py)."""

from __future__ import annotations

import os
from typing import Optional

#: What RAM-backed temporary directories need free, at the least: the
#: largest session measured peaked at a few hundred MB there.
RAM_TEMP_MIN_FREE = 4 << 30


def ram_temproot(mounts: str = "/proc/self/mounts", path: str = "/dev/shm") -> Optional[str]:
    """``path`` when it is a writable tmpfs that allows exec and has room, else None."""
    try:
        with open(mounts, encoding="utf-8", errors="replace") as handle:
            entries = [line.split() for line in handle]
    except OSError:
        return None
    found = [e for e in entries if len(e) >= 4 and e[1] == path]
    if not found or found[-1][2] != "tmpfs" or "noexec" in found[-1][3].split(","):
        return None
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    if stat.f_bavail * stat.f_frsize < RAM_TEMP_MIN_FREE or not os.access(path, os.W_OK | os.X_OK):
        return None
    return path
