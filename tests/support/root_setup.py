"""What the suite installs or starts as root: said once at the start, and one switch to turn it off.

Run as root, three groups of tests change the machine they run on:

* the QEMU multi-NUMA tests (``tests/vm``, marker ``vm``) install
  :data:`QEMU_PACKAGES` with ``apt-get install`` when QEMU or a static
  busybox is missing, run ``apt-get update`` when the package lists are
  stale, and fetch guest kernels into ``tests/vm/.cache`` with ``apt-get
  download`` (which needs no root).  The guests themselves are child
  processes of the test, gone when it ends, and change nothing on the host:
  with QEMU, busybox and the kernels already there they boot under the switch
  too;
* the Slurm recipe's tests (``tests/launchers/test_slurm.py``) install
  :data:`SLURM_PACKAGES` when missing (a temporary ``/usr/sbin/policy-rc.d``
  keeps their services from starting) and start :data:`SLURM_DAEMONS` as root
  on 127.0.0.1, from a temporary directory, stopped afterwards;
* the cpuset and pids tests create cgroup v1 groups under
  :data:`CGROUP_ROOT` and remove them afterwards.

``tests/conftest.py`` prints this at the start of every session
(:func:`header`).  :data:`VARIABLE` set to ``1`` turns all of it off: each of
those tests then skips, saying what it would have done and how to run it
(:func:`refused`).  CI wants every test to run: it sets
``PYNUMABIND_VM_REQUIRED=1`` and ``PYNUMABIND_SLURM_REQUIRED=1``, which turn
an unavailable guest or cluster into a failure; asking for one of them and
for no root setup at once is a contradiction, reported as a usage error at
the start (:func:`conflict`), never a silent skip.
"""

from __future__ import annotations

import os
import shutil
from typing import List, Mapping, Optional

import pytest

#: Set to ``1``: install nothing and start nothing as root; the tests that would, skip.
VARIABLE = "PYNUMABIND_TESTS_NO_ROOT_SETUP"

#: The variables that make an unavailable guest or Slurm cluster a failure (CI sets them).
REQUIRED_VARIABLES = ("PYNUMABIND_VM_REQUIRED", "PYNUMABIND_SLURM_REQUIRED")

#: Debian packages providing ``qemu-system-x86_64`` and a static ``/bin/busybox``.
QEMU_PACKAGES = ("qemu-system-x86", "busybox-static")
#: The programs the QEMU harness looks for before installing :data:`QEMU_PACKAGES`.
QEMU_PROGRAMS = ("qemu-system-x86_64", "busybox")

#: Debian packages of the one-node Slurm cluster.
SLURM_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
#: The programs the cluster needs; any missing one makes it install :data:`SLURM_PACKAGES`.
SLURM_PROGRAMS = ("munged", "slurmctld", "slurmd", "srun", "sinfo")
#: The daemons it starts, as root.
SLURM_DAEMONS = ("munged", "slurmctld", "slurmd")

#: Where the cpuset and pids tests make their cgroup v1 groups.
CGROUP_ROOT = "/sys/fs/cgroup"


def off(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether :data:`VARIABLE` asks for no root setup (``1``; anything else, unset too, is no)."""
    env = os.environ if environ is None else environ
    return env.get(VARIABLE, "").strip() == "1"


def conflict(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """Why the settings contradict each other (a required test and no root setup), or None."""
    env = os.environ if environ is None else environ
    if not off(env):
        return None
    required = [name for name in REQUIRED_VARIABLES if env.get(name) == "1"]
    if not required:
        return None
    return (
        f"{VARIABLE}=1 (install and start nothing as root) contradicts "
        f"{' and '.join(f'{n}=1' for n in required)} (those tests must run, as root): "
        "unset one or the other"
    )


def skip_reason(what: str, instead: str = "") -> str:
    """The reason a test skips under :data:`VARIABLE`: what it would do, and how to run it."""
    other = f", or {instead}" if instead else ""
    return f"{VARIABLE}=1: not {what} as root; to run this test, unset it{other}"


def refused(what: str, instead: str = "") -> None:
    """Skip the calling test when :data:`VARIABLE` is set; ``what`` it would do as root."""
    if off():
        pytest.skip(skip_reason(what, instead))


def _missing(programs: tuple[str, ...]) -> List[str]:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [p for p in programs if shutil.which(p, path=path) is None]


def _when_missing(programs: tuple[str, ...]) -> str:
    missing = _missing(programs)
    return f"missing now: {', '.join(missing)}" if missing else "all present now: no install"


def header(environ: Optional[Mapping[str, str]] = None, euid: Optional[int] = None) -> List[str]:
    """The lines printed at the start of a session: what will be installed or started as root."""
    uid = os.geteuid() if euid is None else euid
    if off(environ):
        return [
            f"root setup: off ({VARIABLE}=1): nothing is installed or started as root; the "
            "QEMU, Slurm and cgroup tests that would, skip and say how to run them"
        ]
    if uid != 0:
        return [
            "root setup: none (not root): nothing is installed or started; the tests that need "
            "root skip and say so"
        ]
    return [
        "root setup: as root, this session may change this machine:",
        f"  - QEMU tests (marker vm): apt-get install {' '.join(QEMU_PACKAGES)} when missing "
        f"({_when_missing(QEMU_PROGRAMS)}), apt-get update when the package lists are stale; "
        "guest kernels fetched with apt-get download into tests/vm/.cache",
        f"  - Slurm recipe tests: apt-get install {' '.join(SLURM_PACKAGES)} when missing "
        f"({_when_missing(SLURM_PROGRAMS)}), then {', '.join(SLURM_DAEMONS)} started as root on "
        "127.0.0.1 from a temporary directory, stopped afterwards",
        f"  - cpuset and pids tests: cgroup v1 groups made and removed under {CGROUP_ROOT}",
        f"  {VARIABLE}=1 turns all of this off (those tests then skip)",
    ]
