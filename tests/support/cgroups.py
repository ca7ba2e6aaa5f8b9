"""Real cgroup v1 groups for the tests: made, joined by a waiting child, removed.

This machine has cgroup v1 (the QEMU guest has v2: see ``tests/vm``).  A
group is made under a controller's hierarchy, set up by writing its files,
and removed afterwards; whatever is still in it then is an orphan of a
failed test, and is killed rather than leaked.  Where the hierarchy is
missing or not writable the calling test skips, saying which; so it does
under ``PYNUMABIND_TESTS_NO_ROOT_SETUP=1`` (:mod:`.root_setup`).

A child that must run inside a group waits for the word "go" on its stdin
(see :func:`childproc.child_command`); :func:`run_moved` moves it in first,
so everything it does after that happens under the group's limits.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
import uuid
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

import pytest

from . import root_setup

CGROUP_V1 = root_setup.CGROUP_ROOT


def write(path: str, value: str) -> None:
    """Write ``value`` to the cgroup file ``path`` (one write, as the kernel wants)."""
    with open(path, "w") as handle:
        handle.write(value)


def tasks(group: str) -> List[int]:
    """The processes in ``group``."""
    with open(f"{group}/cgroup.procs") as handle:
        return [int(line) for line in handle if line.strip()]


def group(controller: str, settings: Mapping[str, str] = {}) -> Iterator[str]:
    """A new group of ``controller`` with ``settings`` (file -> value) written in order.

    A generator for a pytest fixture: yields the group's path, then kills
    what is left in it and removes it (``rmdir`` waits out EBUSY while the
    kernel lets exited tasks go).
    """
    root_setup.refused(f"creating a cgroup v1 {controller} group under {CGROUP_V1}")
    root = f"{CGROUP_V1}/{controller}"
    if not os.path.isdir(root):
        pytest.skip(f"no cgroup v1 {controller} hierarchy at {root}")
    path = f"{root}/pynumabind-test-{uuid.uuid4().hex[:8]}"
    try:
        os.mkdir(path)
    except OSError as exc:
        pytest.skip(f"cgroup {controller} not writable here ({path}: {exc.strerror})")
    try:
        for name, value in settings.items():
            write(f"{path}/{name}", value)
        yield path
    finally:
        for pid in tasks(path):  # orphans (the test has failed already): do not leak them
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        for _ in range(100):
            try:
                os.rmdir(path)
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
                time.sleep(0.05)
        else:
            pytest.fail(f"could not remove test cgroup {path}")


def run_moved(
    group: str, command: Sequence[str], env: Optional[Dict[str, str]] = None
) -> subprocess.CompletedProcess[str]:
    """Start ``command`` (a child that waits for "go"), move it into ``group``, let it run.

    ``communicate`` reads until every holder of the pipes exits, so a
    process the child leaves behind shows here (or hangs the test) too.
    """
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        write(f"{group}/cgroup.procs", str(proc.pid))
        stdout, stderr = proc.communicate("go\n", timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def report_of(done: subprocess.CompletedProcess[str]) -> Dict[str, Any]:
    """The JSON report a child body printed last; the child must have succeeded."""
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert done.returncode == 0 and lines, f"child failed:\n{done.stdout}\n{done.stderr}"
    report: Dict[str, Any] = json.loads(lines[-1])
    return report
