"""The guest is the one the host asked for: its kernel, automatic NUMA balancing, its sysfs.

Runs in every guest session (``tests/vm/test_guest_suite.py``), whatever its kernel and
topology.  The last test prints the guest's NUMA-relevant sysfs files on one tagged line; the
host compares them with the tree committed under ``tests/machines/sysfs/`` (or records it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ..harness import GuestBoot, GuestTopology, format_cpulist
from ..sysfs_record import record, record_line


def test_the_kernel_is_the_one_asked_for(guest_boot: GuestBoot) -> None:
    release = os.uname().release
    assert release == guest_boot.kernel_release
    assert release.startswith(guest_boot.kernel + "."), (release, guest_boot.kernel)


def test_automatic_numa_balancing_is_as_the_harness_booted_the_guest(
    guest_boot: GuestBoot,
) -> None:
    """``numa_balancing=enable``/``disable`` on the kernel command line took."""
    expected = "1" if guest_boot.numa_balancing else "0"
    assert Path("/proc/sys/kernel/numa_balancing").read_text().strip() == expected
    cmdline = Path("/proc/cmdline").read_text().split()
    asked = "numa_balancing=enable" if guest_boot.numa_balancing else "numa_balancing=disable"
    assert asked in cmdline, cmdline


def test_the_sysfs_record_matches_the_topology(
    guest_topology: GuestTopology, capsys: pytest.CaptureFixture[str]
) -> None:
    data = record("/sys")
    files = data["files"]
    for i, node in enumerate(guest_topology.nodes):
        base = f"devices/system/node/node{i}"
        assert files[f"{base}/cpulist"].strip() == format_cpulist(node.cpu_ids)
        distances = [int(d) for d in files[f"{base}/distance"].split()]
        assert distances == guest_topology.distance_matrix()[i]
        assert "MemTotal:" in files[f"{base}/meminfo"]
    with capsys.disabled():
        print("\n" + record_line(data), flush=True)
