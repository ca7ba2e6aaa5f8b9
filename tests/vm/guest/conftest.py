"""Fixtures for tests that run INSIDE a QEMU guest (see ``tests/vm/README.md``).

Outside a guest these tests are not collected (``tests/vm/conftest.py``); if one is named
explicitly on the host command line anyway, it is skipped here rather than run on the wrong
machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..harness import BOOT_ENV, IN_GUEST_ENV, TOPOLOGY_ENV, GuestBoot, GuestTopology

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(IN_GUEST_ENV) == "1":
        return
    skip = pytest.mark.skip(
        reason=f"guest-only test: run through tests/vm/test_guest_suite.py ({IN_GUEST_ENV} unset)"
    )
    for item in items:
        if _HERE in item.path.resolve().parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def guest_topology() -> GuestTopology:
    """The topology this guest was booted with (from ``PYNUMABIND_VM_TOPOLOGY``)."""
    text = os.environ.get(TOPOLOGY_ENV)
    if not text:
        pytest.skip(f"{TOPOLOGY_ENV} not set: not running under the VM harness")
    return GuestTopology.from_json(text)


@pytest.fixture(scope="session")
def guest_boot() -> GuestBoot:
    """How this guest was booted: kernel, NUMA balancing (from ``PYNUMABIND_VM_BOOT``)."""
    boot = GuestBoot.from_env()
    if boot is None:
        pytest.skip(f"{BOOT_ENV} not set: not running under the VM harness")
    return boot


@pytest.fixture
def pristine() -> Iterator[None]:
    """Fail a test that leaves this process bound; put affinity and memory policy back.

    The library tests bind the guest pytest process itself and undo it with
    ``Binding.restore()``; this checks that restore really left every thread's mask and the
    memory policy as they were, so one test's binding cannot leak into the next.
    """
    from pynumabind._os import libnuma as _libnuma

    before: dict[int, frozenset[int]] = {}
    for tid in _task_ids():
        try:
            before[tid] = frozenset(os.sched_getaffinity(tid))
        except ProcessLookupError:  # ended since listed (the watchdog thread of the last test)
            continue
    policy_before = _libnuma.get_mempolicy()
    yield
    leaked = []
    for tid, mask in before.items():
        try:
            now = frozenset(os.sched_getaffinity(tid))
        except ProcessLookupError:
            continue
        if now != mask:
            leaked.append(f"thread {tid} CPUs {sorted(now)} (was {sorted(mask)})")
            os.sched_setaffinity(tid, mask)
    policy = _libnuma.get_mempolicy()
    if (policy.mode, policy.nodes) != (policy_before.mode, policy_before.nodes):
        leaked.append(f"memory policy {policy.kernel_policy} {sorted(policy.nodes)}")
        _libnuma.set_mempolicy(policy_before.mode, policy_before.nodes, policy_before.flags)
    assert not leaked, "test left the process bound: " + "; ".join(leaked)


def _task_ids() -> list[int]:
    return [int(t) for t in os.listdir("/proc/self/task")]
