"""Run the guest-side test modules in ``tests/vm/guest`` inside one multi-NUMA guest.

One boot of ``harness.STANDARD_TOPOLOGY``; the guest runs ``pytest tests/vm/guest`` with the
host's interpreter, ``sys.path`` and working tree, and this test passes only if that run passed.
The guest's pytest output is shown on failure (and with ``-rP``/``-s`` on success).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .harness import STANDARD_TOPOLOGY, VmTools, run_pytest_in_guest

GUEST_TESTS = Path(__file__).resolve().parent / "guest"

# Plugins the guest-side tests do not use and whose import dominates a guest run under TCG.
# Kept on if the project's addopts need them (an option of a disabled plugin is an error).
SLOW_UNUSED_PLUGINS = {"hypothesispytest": "hypothesis", "benchmark": "benchmark"}


@pytest.mark.vm
def test_guest_suite_passes(vm_tools: VmTools, pytestconfig: pytest.Config) -> None:
    addopts = " ".join(str(opt) for opt in pytestconfig.getini("addopts"))
    disabled = [name for name, key in SLOW_UNUSED_PLUGINS.items() if key not in addopts]
    result = run_pytest_in_guest(
        STANDARD_TOPOLOGY,
        ["-v", "-rfEs", "--durations=12", str(GUEST_TESTS)],
        timeout=600,  # TCG: ~100 s idle, 210+ s on a loaded 2-core machine
        disable_plugins=disabled,
    )
    boot = "?" if result.boot_seconds is None else f"{result.boot_seconds:.1f}"
    sys.stdout.write(
        f"--- guest pytest: {result.seconds:.1f} s in all, {boot} s of it booting ---\n"
        f"{result.output}\n"
    )
    if result.returncode != 0:
        pytest.fail(f"guest pytest exited {result.returncode}:\n{result.output}", pytrace=False)
    assert " passed" in result.output
    assert " skipped" not in result.output, "guest tests skipped inside the guest"
