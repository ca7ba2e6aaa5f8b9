"""Fixtures for tests that run INSIDE a QEMU guest (see ``tests/vm/README.md``).

Outside a guest these tests are not collected (``tests/vm/conftest.py``); if one is named
explicitly on the host command line anyway, it is skipped here rather than run on the wrong
machine.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ..harness import IN_GUEST_ENV, TOPOLOGY_ENV, GuestTopology

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
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
