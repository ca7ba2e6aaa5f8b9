"""Child bodies for the cgroup readers: wait until the parent has moved us, then read."""

from __future__ import annotations

import sys
from typing import Any, Dict


def cgroup_limits_once_moved() -> Dict[str, Any]:
    """:func:`pynumabind._os.proc.cgroup_limits` after the parent says "go" on stdin."""
    sys.stdin.readline()
    from pynumabind._os import proc

    limits = proc.cgroup_limits()
    devices = limits.devices
    return {
        "version": limits.version,
        "paths": limits.paths,
        "cpuset_cpus": None if limits.cpuset_cpus is None else sorted(limits.cpuset_cpus),
        "cpuset_mems": None if limits.cpuset_mems is None else sorted(limits.cpuset_mems),
        "cpuset_file": limits.cpuset_file,
        "devices": None
        if devices is None
        else {"path": devices.path, "all": devices.everything, "gpus": sorted(devices.nvidia_gpus)},
    }
