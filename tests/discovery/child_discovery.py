"""Child bodies of the discovery tests (discovery/test_sysfs.py): live reads in a fresh process.

Order matters in each (libnuma loaded before or after a change of the
process's CPUs or cpuset), so pynumabind is imported inside the functions,
never at module level.
"""

from __future__ import annotations

import os
from typing import Any, Dict


def allowed_cpus_after_setaffinity() -> Dict[str, Any]:
    """Load libnuma, then narrow this process to CPU 1, then detect."""
    from pynumabind._os import libnuma as _libnuma

    _libnuma.load()
    from pynumabind.discovery import detect_topology

    from ..support.childstate import cpus_allowed

    os.sched_setaffinity(0, {1})
    topo = detect_topology(use_nvml=False, environ={})
    return {"allowed": sorted(topo.allowed_cpus), "status": cpus_allowed()}


def allowed_sets_in_cpuset(group: str) -> Dict[str, Any]:
    """Move this process into the cpuset ``group`` first, then import and detect."""
    with open(os.path.join(group, "tasks"), "w") as handle:
        handle.write(str(os.getpid()))
    from pynumabind.discovery import detect_topology

    topo = detect_topology(use_nvml=False, environ={})
    return {"cpus": sorted(topo.allowed_cpus), "mems": sorted(topo.allowed_mems)}
