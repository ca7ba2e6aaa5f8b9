"""pytest wiring for the QEMU multi-NUMA guest tests.

* Registers the ``vm`` marker (tests that boot guests; deselect with ``-m "not vm"``).
* ``vm_tools``: session fixture that obtains QEMU, busybox and the default kernel, or skips with
  the reason (fails instead when ``PYNUMABIND_VM_REQUIRED=1``, as in CI); ``vm_tools_for(name)``
  does the same for another kernel of ``harness.KERNELS`` (``"6.12"``), under the same rule.
* ``tests/vm/guest/`` holds tests meant to run INSIDE a guest; they are not collected on the host.
  ``test_guest_suite.py`` boots a guest and runs them there (the harness sets
  ``PYNUMABIND_IN_GUEST=1``).
"""

from __future__ import annotations

import os
from typing import Callable

import pytest

from .harness import DEFAULT_KERNEL, IN_GUEST_ENV, VmTools, VmUnavailable, ensure_tools

IN_GUEST = os.environ.get(IN_GUEST_ENV) == "1"

REQUIRED_ENV = "PYNUMABIND_VM_REQUIRED"
"""Set to ``1`` (CI does) to make a missing QEMU/kernel a test failure instead of a skip."""

collect_ignore = [] if IN_GUEST else ["guest"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "vm: boots QEMU multi-NUMA guests (slow; skipped only when QEMU or the guest kernel "
        "cannot be obtained)",
    )


def _tools(kernel: str) -> VmTools:
    if IN_GUEST:
        pytest.skip("already inside a guest; no nested guests")
    try:
        return ensure_tools(kernel)
    except VmUnavailable as exc:
        if os.environ.get(REQUIRED_ENV) == "1":
            pytest.fail(
                f"{REQUIRED_ENV}=1 but the QEMU multi-NUMA guest (kernel {kernel}) is "
                f"unavailable: {exc}"
            )
        pytest.skip(f"QEMU multi-NUMA guest (kernel {kernel}) unavailable: {exc}")


@pytest.fixture(scope="session")
def vm_tools() -> VmTools:
    """QEMU, busybox and the default (6.1) kernel, installed/fetched if needed; skips the test
    if impossible (fails under ``PYNUMABIND_VM_REQUIRED=1``)."""
    return _tools(DEFAULT_KERNEL.name)


@pytest.fixture(scope="session")
def vm_tools_for() -> Callable[[str], VmTools]:
    """``vm_tools_for("6.12")``: the same for a kernel of ``harness.KERNELS``, by name."""
    return _tools
