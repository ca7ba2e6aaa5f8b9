"""Run the guest-side test modules in ``tests/vm/guest`` inside one multi-NUMA guest.

One boot of ``harness.STANDARD_TOPOLOGY``; the guest runs ``pytest tests/vm/guest`` with the
host's interpreter, ``sys.path`` and working tree, and this test passes only if that run passed.
The guest's pytest output is shown on failure (and with ``-rP``/``-s`` on success).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .harness import HOST_RECORD_ENV, STANDARD_TOPOLOGY, VmTools, run_pytest_in_guest

GUEST_TESTS = Path(__file__).resolve().parent / "guest"

# Plugins the guest-side tests do not use and whose import dominates a guest run under TCG.
# Kept on if the project's addopts need them (an option of a disabled plugin is an error).
SLOW_UNUSED_PLUGINS = {"hypothesispytest": "hypothesis", "benchmark": "benchmark"}


def host_record(folder: Path) -> str:
    """This host's advice record (its real machine; a verdict from equal cells), for the guest.

    The guest sees the host's /tmp read-only, so the file is read there at
    this path; in the guest it must be stale (another machine).
    """
    from pynumabind.advisor import MemoryCell, MemoryMatrix, Spread
    from pynumabind.advisor.record import Advice, save_record, this_machine
    from pynumabind.advisor.rule import decide

    same = MemoryCell(Spread.of([99.0, 99.5, 100.0, 100.5, 101.0]))
    memory = MemoryMatrix((0,), (0,), ((same,),))
    advice = Advice(memory, (), "not measured (host test)", None, None, decide(memory))
    return save_record(advice, str(folder / "host-advice.json"), machine=this_machine())


@pytest.mark.vm
def test_guest_suite_passes(vm_tools: VmTools, pytestconfig: pytest.Config, tmp_path: Path) -> None:
    addopts = " ".join(str(opt) for opt in pytestconfig.getini("addopts"))
    disabled = [name for name, key in SLOW_UNUSED_PLUGINS.items() if key not in addopts]
    result = run_pytest_in_guest(
        STANDARD_TOPOLOGY,
        ["-v", "-rfEs", "--durations=12", str(GUEST_TESTS)],
        timeout=600,  # TCG: ~100 s idle, 210+ s on a loaded 2-core machine
        disable_plugins=disabled,
        env={HOST_RECORD_ENV: host_record(tmp_path)},
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
