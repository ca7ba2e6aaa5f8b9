"""Guest-side: ``pynumabind.advise`` and mode ``advised`` on a real multi-node kernel.

Under TCG the numbers mean nothing (QEMU gives every node the same emulated
memory), but the shape of the matrix, where each measurement's buffers
landed (``move_pages`` on the guest kernel) and the verdict are real:
CPU nodes 0 and 1 x memory nodes 0, 1 and the memory-only node 2, every
buffer 100% on its node, and a verdict that follows the rule (see the test).

Mode ``advised`` here: ``advise --save`` writes the guest's record (three
nodes, the guest's SLIT and kernel); ``pynumabind exec --rank 0 --mode
advised`` runs with every CPU and the default policy under a record that
says "do not bind", on node 0's CPUs with memory preferred there under one
that says "bind"; the host's record (saved by the host test, a one-node
machine) is stale here, and a missing one is too: one warning each, naming
the file and ``pynumabind advise --save``, then the default plan.  A
directory of records holding the guest's and the host's: the guest follows
its own and says nothing of the host's; with the host's alone, one warning
naming the directory and the closest record's differences.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Tuple

import pytest

import pynumabind
from pynumabind.advisor.rule import NO_DIFFERENCE

from ..harness import HOST_RECORD_ENV
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
    memory_comparisons = [c for c in rec.comparisons if c.better.startswith("node ")]
    assert len(memory_comparisons) == 2 * 2  # per CPU node: its best node against the other two
    assert advice.memory is not None  # and weighted interleave over its own and node 2, measured:
    measured = [c for c in advice.memory.interleave if c.bandwidth is not None]
    assert len(rec.comparisons) == 2 * 2 + len(measured)
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


def test_cli_json_in_the_guest(tmp_path: Path) -> None:
    saved = tmp_path / "advice.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pynumabind",
            "advise",
            "--quick",
            "--json",
            "--no-latency",
            "--save",
            str(saved),
        ],
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
    # The saved record: the same document, plus the guest as it is.
    record = json.loads(saved.read_text(encoding="utf-8"))
    assert {k: record[k] for k in data if k != "seconds"} == {
        k: v for k, v in data.items() if k != "seconds"
    }
    machine = record["machine"]
    assert [(n["id"], n["cpus"]) for n in machine["nodes"]] == [(0, "0-1"), (1, "2-3"), (2, "")]
    sizes = [n["memory_bytes"] for n in machine["nodes"]]
    assert all(size > 0 for size in sizes) and sizes[2] < sizes[0], sizes
    assert machine["distances"] == [[10, 21, 40], [21, 10, 30], [40, 30, 10]]
    assert machine["kernel"] == os.uname().release
    loaded = pynumabind.load_advice(str(saved))  # of this machine: not stale
    assert loaded.recommendation.bind is data["recommendation"]["bind"]


# ------------------------------------------------------------ mode advised


def _record(path: Path, bind: bool) -> str:
    """A record of this guest whose verdict is ``bind`` (equal cells, or local 2x remote)."""
    from pynumabind.advisor import MemoryCell, MemoryMatrix, Spread
    from pynumabind.advisor.record import Advice, save_record, this_machine
    from pynumabind.advisor.rule import decide

    def cell(median: float) -> MemoryCell:
        return MemoryCell(Spread.of([median * f for f in (0.99, 0.995, 1.0, 1.005, 1.01)]))

    remote = 50.0 if bind else 100.0
    memory = MemoryMatrix(
        (0, 1), (0, 1), ((cell(100.0), cell(remote)), (cell(remote), cell(100.0)))
    )
    recommendation = decide(memory)
    assert recommendation.bind is bind
    advice = Advice(memory, (), "not measured (test)", None, None, recommendation)
    return save_record(advice, str(path), machine=this_machine())


def _exec_rank0(record: str) -> Tuple[str, str, str]:
    """``exec --rank 0 --mode advised``: (CPUs allowed, policies in numa_maps, stderr)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pynumabind",
            "exec",
            "--rank",
            "0",
            "--mode",
            "advised",
            "--",
            "cat",
            "/proc/self/status",
            "/proc/self/numa_maps",
        ],
        capture_output=True,
        text=True,
        timeout=200,
        cwd=REPO_ROOT,
        env={**os.environ, "PYNUMABIND_ADVICE": record},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    cpus = next(
        line.split()[1] for line in done.stdout.splitlines() if line.startswith("Cpus_allowed_list")
    )
    policies = {line.split()[1] for line in done.stdout.splitlines() if "kernelpagesize" in line}
    return cpus, ",".join(sorted(policies)), done.stderr


def test_advised_do_not_bind_runs_rank0_with_every_cpu(tmp_path: Path) -> None:
    cpus, policies, stderr = _exec_rank0(_record(tmp_path / "same.json", bind=False))
    assert (cpus, policies) == ("0-3", "default"), stderr
    assert "WARNING" not in stderr


def test_advised_bind_puts_rank0_on_node0(tmp_path: Path) -> None:
    cpus, policies, stderr = _exec_rank0(_record(tmp_path / "local.json", bind=True))
    assert (cpus, policies) == ("0-1", "prefer:0"), stderr


def _one_warning(stderr: str, *words: str) -> str:
    lines = [line for line in stderr.splitlines() if "pynumabind advise --save" in line]
    assert len(lines) == 1, stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def test_the_hosts_record_is_stale_here_and_the_default_plan_runs() -> None:
    """The host test saved its machine's record (one node) and named it in the environment."""
    host = os.environ.get(HOST_RECORD_ENV)
    assert host, f"{HOST_RECORD_ENV} not set: the host test saves the host's record"
    cpus, policies, stderr = _exec_rank0(host)
    warning = _one_warning(stderr, host, "is stale")
    from pynumabind.advisor.record import load_record, staleness, this_machine

    differences = staleness(load_record(host).machine, this_machine())
    assert differences, "the host's record matches the guest"
    for difference in differences:
        assert difference in warning, (difference, warning)
    # The default plan: mode node, rank 0 of one rank per node with CPUs -> node 0.
    assert (cpus, policies) == ("0-1", "prefer:0"), stderr


def test_a_missing_record_warns_the_same_way(tmp_path: Path) -> None:
    missing = str(tmp_path / "none.json")
    cpus, policies, stderr = _exec_rank0(missing)
    _one_warning(stderr, missing, "no advice record")
    assert (cpus, policies) == ("0-1", "prefer:0"), stderr


def test_a_node_short_of_memory_is_skipped_the_others_measured() -> None:
    """Node 2 (256 MiB) filled by this process: its column is skipped and says why.

    The buffers are sized per node by what the kernel can give there, and
    never below twice the last-level cache: a node that cannot hold two of
    them is not measured (its figures would be cache speed).  Nodes 0 and 1
    still are, with buffers of at least that size.
    """
    import ctypes
    import mmap

    from pynumabind._os.caches import llc_bytes
    from pynumabind.advisor import _memory

    # As advise reckons it: the largest LLC total of one CPU node (nodes 0 and 1: CPUs 0-1, 2-3).
    llc = max(llc_bytes([0, 1]) or 0, llc_bytes([2, 3]) or 0) or None
    floor = _memory.MIN_LLC_MULTIPLE * (llc or 0)
    before = _memory.memory_available([2])[2]
    assert before is not None and 0 < before <= 256 << 20
    keep = max(2 * floor, 8 << 20)  # leaves a quarter under the floor, and no OOM
    fill = mmap.mmap(-1, max(before - keep, mmap.PAGESIZE))
    try:
        with pynumabind.memory_on(node=2, policy="bind"):
            ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(fill)), 1, len(fill))
        after = _memory.memory_available([2])[2]
        advice = pynumabind.advise(quick=True, repeats=3, latency=False)
    finally:
        fill.close()
    memory = advice.memory
    assert memory is not None and memory.memory_nodes == (0, 1, 2)
    skipped = [cell.skipped for cell in memory.cells[0] + memory.cells[1]]
    if llc is None:  # the guest CPU shows no cache: nothing to hold the size against
        assert any("LLC size unreadable" in note for note in memory.notes), memory.notes
        return
    assert memory.llc_bytes == llc
    assert after is not None and after // 4 < floor, (after, floor)
    for row in memory.cells:
        for node, cell in zip(memory.memory_nodes, row):
            if node == 2:
                assert cell.bandwidth is None and cell.skipped is not None, skipped
                assert "memory node 2 can give" in cell.skipped
                assert f"less than 2 x the last-level cache ({llc >> 20} MiB)" in cell.skipped
            else:
                assert cell.skipped is None and cell.bandwidth is not None, skipped
    assert memory.buffer_bytes >= floor
    assert "skipped" in str(advice) and memory.cells[0][2].skipped in str(advice)


def test_a_directory_of_two_machine_types_the_guest_follows_its_own(tmp_path: Path) -> None:
    """The guest's record and the host's (one node) side by side, as on a shared file system."""
    host = os.environ.get(HOST_RECORD_ENV)
    assert host, f"{HOST_RECORD_ENV} not set: the host test saves the host's record"
    from pynumabind.advisor.record import record_name, this_machine

    place = tmp_path / "records"
    place.mkdir()
    shutil.copy(host, place / "host-machine.json")
    # Only the host's record: one warning naming the directory, then the default plan.
    cpus, policies, stderr = _exec_rank0(f"{place}/")
    _one_warning(stderr, f"no advice record for this machine in {place}/", "1 record")
    assert (cpus, policies) == ("0-1", "prefer:0"), stderr
    # The guest's own "do not bind" beside it: followed, the host's ignored without a word.
    own = _record(place, bind=False)  # an existing directory
    assert own == str(place / record_name(this_machine()))
    assert sorted(os.listdir(place)) == sorted(["host-machine.json", os.path.basename(own)])
    cpus, policies, stderr = _exec_rank0(str(place))
    assert (cpus, policies) == ("0-3", "default"), stderr
    assert "WARNING" not in stderr and "host-machine.json" not in stderr, stderr
