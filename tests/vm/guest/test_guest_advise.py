"""Guest-side: ``pynumabind.advise`` on a real multi-node kernel (issue 21).

Under TCG the numbers mean nothing (QEMU gives every node the same emulated
memory), but the shape of the matrix, where each measurement's buffers
landed (``move_pages`` on the guest kernel) and the verdict are real:
CPU nodes 0 and 1 x memory nodes 0, 1 and the memory-only node 2, every
buffer 100% on its node, and a verdict that follows the rule (see the test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import pynumabind
from pynumabind.advisor.rule import NO_DIFFERENCE

from ._guestlib import REPO_ROOT

pytestmark = pytest.mark.usefixtures("pristine")


@pytest.fixture(scope="module")
def advice() -> pynumabind.Advice:
    return pynumabind.advise(quick=True, buffer_bytes=4 << 20, repeats=5, latency=False)


def test_matrix_covers_every_cpu_node_and_every_memory_node(advice: pynumabind.Advice) -> None:
    memory = advice.memory
    assert memory is not None
    assert memory.cpu_nodes == (0, 1)
    assert memory.memory_nodes == (0, 1, 2)
    for cpu_node, row in zip(memory.cpu_nodes, memory.cells):
        assert len(row) == 3
        for memory_node, cell in zip(memory.memory_nodes, row):
            assert cell.error is None, (cpu_node, memory_node, cell.error)
            assert cell.bandwidth is not None and cell.bandwidth.median > 0
            assert cell.threads == 2  # both allowed CPUs of the CPU node


def test_each_measurement_buffer_landed_on_its_memory_node(advice: pynumabind.Advice) -> None:
    assert advice.memory is not None
    for row in advice.memory.cells:
        for memory_node, cell in zip(advice.memory.memory_nodes, row):
            assert cell.placement is not None
            assert cell.placement.wanted == memory_node
            assert cell.placement.checked == (4 << 20) // os.sysconf("SC_PAGE_SIZE")
            assert cell.placement.pages == {memory_node: cell.placement.checked}


def test_verdict_under_tcg_follows_the_rule(advice: pynumabind.Advice) -> None:
    """The verdict is the rule's, on this guest's own samples.

    Expected: "no measurable difference" (every node is the same emulated
    memory).  But TCG's memory backends are separate host mappings, and one
    run here measured node 1 at 1.49x node 0 from CPU node 0 with every
    sample separated (noise range 1.16-3.45x), so the verdict is not fixed
    on TCG.  What is fixed: a difference is called only with every sample of
    the better placement above every sample of the worse, and otherwise the
    verdict is the plain sentence.
    """
    rec = advice.recommendation
    shown = "\n".join(c.text() for c in rec.comparisons)
    assert rec.basis == "measured"
    assert len(rec.comparisons) == 2 * 2  # per CPU node: its best node against the other two
    assert any("virtual machine" in note for note in advice.notes)
    measurable = [c for c in rec.comparisons if c.measurable]
    if not measurable:
        assert rec.bind is False, shown
        assert rec.verdict == NO_DIFFERENCE
    else:  # a measured difference must reach the recommendation, with its numbers
        assert rec.verdict != NO_DIFFERENCE, shown
        for comparison in measurable:
            assert any(comparison.text() in reason for reason in rec.reasons), shown


def test_firmware_slit_is_the_guests(advice: pynumabind.Advice) -> None:
    assert advice.firmware is not None
    assert advice.firmware.nodes == (0, 1, 2)
    assert advice.firmware.distances == ((10, 21, 40), (21, 10, 30), (40, 30, 10))


def test_cli_json_in_the_guest() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pynumabind", "advise", "--quick", "--json", "--no-latency"],
        capture_output=True,
        text=True,
        timeout=200,
        cwd=REPO_ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["memory"]["cpu_nodes"] == [0, 1]
    assert data["memory"]["memory_nodes"] == [0, 1, 2]
    assert [[p["fraction"] for p in row] for row in data["memory"]["placement"]] == [[1.0] * 3] * 2
    assert data["copies"] == [] and data["copies_status"]["reason"]
    assert set(data["recommendation"]) >= {"bind", "mode", "policy", "reasons"}
    sys.stdout.write(done.stdout)
