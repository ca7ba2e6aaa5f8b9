"""Memory tiers, HMAT access attributes and weighted interleave as a 6.12 guest shows them.

Runs inside the guest booted with ``harness.HMAT_TOPOLOGY`` on kernel 6.12 (the
``6.12-hmat`` session of ``tests/vm/test_guest_suite.py``): node 0 (CPUs 0-1) and node 1
(CPUs 2-3) with 20480 MiB/s and 100 ns to their own CPUs, node 2 memory only with a quarter
of that bandwidth at three times the latency from its nearest initiator, node 1.  The
expectations are derived from the topology the host booted (``guest_topology``), so they say
what the kernel made of the firmware's figures; no pynumabind code is involved in those.

The last part is pynumabind's weighted interleave on this kernel, which has
``MPOL_WEIGHTED_INTERLEAVE``: a buffer placed by exact weights (runs), a worker started by
``pynumabind exec`` allocating by the kernel's system-wide weights, a worker whose requested
weights differ from the kernel's saying so once, the kernel's weights written on request,
``verify()`` judging the split, and a worker started with ``--tiers all`` spreading over its
node and the slower tier's node 2; and ``host_buffer``: one on the memory-only node, all of its
pages there, and one by exact weights.  Every test that changes the kernel's weights puts them back.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

from ..harness import GuestBoot, GuestTopology, HmatLink, format_cpulist
from ._guestlib import (
    REPO_ROOT,
    check_weights_3_to_1_on_64_mib,
    exec_split,
    kernel_weights,
    page_counts,
    set_kernel_weights,
)

NODE_SYSFS = Path("/sys/devices/system/node")
TIERS_SYSFS = Path("/sys/devices/virtual/memory_tiering")
WEIGHTS_SYSFS = Path("/sys/kernel/mm/mempolicy/weighted_interleave")

# mm/memory-tiers.c (6.12): DRAM's abstract distance is MEMTIER_ADISTANCE_DRAM = 4 * 128 + 64,
# a tier spans 128 (MEMTIER_CHUNK_BITS = 7) and is named memory_tier<adistance >> 7.
ADISTANCE_DRAM = 4 * 128 + 64
CHUNK_BITS = 7


def read(path: Path) -> str:
    return path.read_text().strip()


def best_initiators(topology: GuestTopology, target: int) -> Tuple[List[int], HmatLink]:
    """The CPU nodes with the best HMAT figures to ``target``, and those figures."""
    links = {i: link for (i, t), link in topology.hmat.items() if t == target}
    latency = min(link.latency_ns for link in links.values())
    bandwidth = max(link.bandwidth_mib_s for link in links.values())
    best = [
        i
        for i, link in sorted(links.items())
        if (link.latency_ns, link.bandwidth_mib_s) == (latency, bandwidth)
    ]
    return best, HmatLink(latency, bandwidth)


def tiers() -> Dict[str, str]:
    """``memory_tierN`` -> its nodelist, for every tier the kernel made."""
    return {
        entry.name: read(entry / "nodelist")
        for entry in TIERS_SYSFS.iterdir()
        if re.fullmatch(r"memory_tier\d+", entry.name)
    }


def test_this_is_the_612_hmat_guest(guest_boot: GuestBoot, guest_topology: GuestTopology) -> None:
    assert guest_boot.kernel == "6.12" and os.uname().release.startswith("6.12.")
    assert guest_topology.hmat, "booted without an HMAT"
    assert read(NODE_SYSFS / "has_cpu") == "0-1"
    assert read(NODE_SYSFS / "has_memory") == "0-2"


@pytest.mark.parametrize("access", ["access0", "access1"])
@pytest.mark.parametrize("target", [0, 1, 2])
def test_hmat_access_attributes_name_the_best_initiator(
    guest_topology: GuestTopology, target: int, access: str
) -> None:
    """``access0`` (any initiator) and ``access1`` (CPU initiators): here both are the CPU
    nodes with the best figures, and the figures are the firmware's."""
    initiators = NODE_SYSFS / f"node{target}" / access / "initiators"
    best, link = best_initiators(guest_topology, target)
    linked = sorted(
        int(e.name[4:]) for e in initiators.iterdir() if re.fullmatch(r"node\d+", e.name)
    )
    assert linked == best
    for node in linked:
        assert (initiators / f"node{node}").resolve() == (NODE_SYSFS / f"node{node}").resolve()
    for kind in ("read", "write"):
        assert int(read(initiators / f"{kind}_latency")) == link.latency_ns
        assert int(read(initiators / f"{kind}_bandwidth")) == link.bandwidth_mib_s


def test_node2_has_a_quarter_of_the_bandwidth_at_a_higher_latency(
    guest_topology: GuestTopology,
) -> None:
    def figures(node: int) -> Tuple[int, int]:
        base = NODE_SYSFS / f"node{node}" / "access0" / "initiators"
        return int(read(base / "read_bandwidth")), int(read(base / "read_latency"))

    (bw0, lat0), (bw1, lat1), (bw2, lat2) = figures(0), figures(1), figures(2)
    assert (bw0, lat0) == (bw1, lat1) == (20480, 100)
    assert bw2 * 4 == bw0 == 20480 and bw2 == 5120
    assert lat2 > lat0
    assert best_initiators(guest_topology, 2)[0] == [1]  # nearest socket, as in the SLIT


def test_nodes_0_and_1_share_a_tier_and_node_2_has_its_own() -> None:
    found = tiers()
    by_nodes = {nodes: name for name, nodes in found.items()}
    assert sorted(by_nodes) == ["0-1", "2"], found
    dram, slow = (int(by_nodes[n][len("memory_tier") :]) for n in ("0-1", "2"))
    assert slow > dram, found  # a higher abstract distance: a slower tier


def test_tier_ids_follow_the_kernels_abstract_distance(guest_topology: GuestTopology) -> None:
    """DRAM (the CPU nodes) at MEMTIER_ADISTANCE_DRAM; node 2 scaled from its HMAT figures
    relative to DRAM's, in mm/memory-tiers.c's order of integer operations
    (``mt_perf_to_adistance``; read and write figures are equal here)."""
    _, dram = best_initiators(guest_topology, 0)
    _, slow = best_initiators(guest_topology, 2)
    adistance = ADISTANCE_DRAM * (2 * slow.latency_ns) // (2 * dram.latency_ns)
    adistance = adistance * (2 * dram.bandwidth_mib_s) // (2 * slow.bandwidth_mib_s)
    expected = {
        f"memory_tier{ADISTANCE_DRAM >> CHUNK_BITS}": format_cpulist((0, 1)),
        f"memory_tier{adistance >> CHUNK_BITS}": "2",
    }
    assert tiers() == expected
    assert expected == {"memory_tier4": "0-1", "memory_tier54": "2"}


def test_show_json_gives_node_2_a_tier_of_its_own() -> None:
    """``pynumabind show --json`` (this machine, read live) carries each node's tier as the
    kernel names it: nodes 0-1 share one, node 2 has its own, slower (higher) one -- the same
    numbers ``memory_tiering`` lists above, and no ranks planned from them here."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run(
        [sys.executable, "-m", "pynumabind", "show", "--json", "--no-nvml"],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    nodes = json.loads(proc.stdout)["topology"]["nodes"]
    tier = {node["id"]: node["tier"] for node in nodes}
    assert sorted(tier) == [0, 1, 2], nodes
    assert tier[0] == tier[1] and tier[2] not in (tier[0], tier[1]) and tier[2] > tier[0], tier
    assert {f"memory_tier{t}": n for t, n in ((tier[0], "0-1"), (tier[2], "2"))} == tiers()


def test_weighted_interleave_has_a_weight_per_memory_node() -> None:
    names = sorted(entry.name for entry in WEIGHTS_SYSFS.iterdir())
    assert names == ["node0", "node1", "node2"]
    for name in names:
        assert 1 <= int(read(WEIGHTS_SYSFS / name)) <= 255


def test_weighted_interleave_weights_can_be_set_by_root() -> None:
    """The system-wide weights are the kernel's own, writable by root; put back after."""
    path = WEIGHTS_SYSFS / "node0"
    before = read(path)
    try:
        path.write_text("3")
        assert read(path) == "3"
    finally:
        path.write_text(before)
    assert read(path) == before


# --------------------------------------------------- pynumabind's weighted interleave


@pytest.fixture
def weights_put_back() -> Iterator[Dict[int, int]]:
    """The kernel's weights as they were (this kernel has no ``auto`` switch); put back after."""
    before = kernel_weights()
    try:
        yield before
    finally:
        set_kernel_weights(before)
    assert kernel_weights() == before


def share(counts: Dict[int, int], node: int) -> float:
    return counts.get(node, 0) / sum(counts.values())


def test_bind_memory_by_weights_3_to_1_leaves_three_quarters_on_node_0() -> None:
    check_weights_3_to_1_on_64_mib()


def test_a_host_buffer_on_the_memory_only_node_has_every_page_there() -> None:
    """``host_buffer(64 MiB, node=2)``: a writable buffer whose pages are all on node 2.

    Node 2 has memory and no CPUs: the buffer is bound before its first touch and prefaulted
    from the nearest CPU node's CPUs (node 1's, 2-3, by the SLIT).  Where its pages are is
    read back page by page (``move_pages``, else the page table), not taken from the
    library's census; and again after every page is written.
    """
    from pynumabind.binding.host import host_buffer

    size = 64 << 20
    pages = size // mmap.PAGESIZE
    with host_buffer(size, node=2) as buf:
        before = page_counts(buf)
        assert before == {2: pages}, before  # every page exists already, all on node 2
        view = memoryview(buf)
        assert not view.readonly and view.nbytes == size
        view.release()
        buf[:: mmap.PAGESIZE] = b"\2" * pages  # one byte a page, one C loop (TCG)
        assert page_counts(buf) == {2: pages}
        assert buf.placement.pages_per_node == {2: pages} and buf.placement.complete
        assert any(n.startswith("prefaulted") and "node 2: " in n for n in buf.notes), buf.notes
        assert any("on CPUs 2-3" in n for n in buf.notes), buf.notes


def test_a_host_buffer_by_weights_3_to_1_puts_three_quarters_on_node_0() -> None:
    """``host_buffer`` places by exact weights through ``bind_memory``'s runs, before the touch."""
    from pynumabind.binding.host import host_buffer

    size = 64 << 20
    pages = size // mmap.PAGESIZE
    with host_buffer(size, policy="weighted-interleave", weights={0: 3, 2: 1}) as buf:
        counts = page_counts(buf)
        assert set(counts) == {0, 2} and sum(counts.values()) == pages, counts
        assert 0.70 <= counts[0] / pages <= 0.80, counts
        assert buf.placement.runs > 1 and buf.placement.in_proportion is True
        assert buf.placement.pages_per_node == counts, buf.placement.summary()


def test_a_worker_allocates_by_the_kernels_weights(weights_put_back: Dict[int, int]) -> None:
    set_kernel_weights({0: 3, 2: 1})
    child, stderr = exec_split("--policy", "weighted-interleave", "--interleave-nodes", "0,2")
    assert child["policy"] == ["MPOL_WEIGHTED_INTERLEAVE", [0, 2]]
    assert set(child["counts"]) == {0, 2}, child
    assert 0.70 <= share(child["counts"], 0) <= 0.80, child
    assert "WARNING" not in stderr, stderr


def test_a_worker_with_tiers_all_on_node_0_interleaves_over_nodes_0_and_2(
    weights_put_back: Dict[int, int],
) -> None:
    """``--tiers all``: rank 0 of 2 (node 0, CPUs 0-1) spreads over its own node and node 2,
    the memory-only node of the slower tier; its pages follow the kernel's weights 3:1.  The
    policy is read back with ``get_mempolicy`` in the worker, the pages with ``move_pages``."""
    set_kernel_weights({0: 3, 2: 1})
    child, stderr = exec_split("--nprocs", "2", "--mode", "node", "--tiers", "all")
    assert child["policy"] == ["MPOL_WEIGHTED_INTERLEAVE", [0, 2]], child
    assert set(child["counts"]) == {0, 2}, child
    assert 0.70 <= share(child["counts"], 0) <= 0.80, child
    assert "WARNING" not in stderr, stderr


def test_a_worker_whose_weights_differ_from_the_kernels_says_so_once(
    weights_put_back: Dict[int, int],
) -> None:
    set_kernel_weights({0: 3, 2: 1})
    child, stderr = exec_split("--policy", "weighted-interleave", "--weights", "0:1,2:1")
    said = "requested weights 0:1,2:1, but the kernel's system-wide weights for these nodes are"
    assert stderr.count(said) == 1, stderr
    assert [line for line in stderr.splitlines() if "WARNING" in line] == [
        line for line in stderr.splitlines() if said in line
    ]
    # What the worker allocates follows the kernel's weights, as the warning says.
    assert 0.70 <= share(child["counts"], 0) <= 0.80, child


def test_set_system_weights_writes_them_and_the_worker_follows(
    weights_put_back: Dict[int, int],
) -> None:
    set_kernel_weights({0: 1, 1: 1, 2: 1})
    child, stderr = exec_split(
        "--policy", "weighted-interleave", "--weights", "0:3,2:1", "--set-system-weights", "--json"
    )
    assert kernel_weights() == {0: 3, 1: 1, 2: 1}  # node 1 untouched
    report = json.loads(stderr.strip().splitlines()[-1])
    assert report["system_weights_before"] == {"0": 1, "2": 1}
    assert report["kernel_weights"] == {"0": 3, "2": 1} and report["weights_mismatch"] is None
    assert any("restore() leaves them as set" in note for note in report["notes"])
    assert 0.70 <= share(child["counts"], 0) <= 0.80, child


def test_verify_judges_the_split_against_the_requested_weights(
    weights_put_back: Dict[int, int],
) -> None:
    from pynumabind import bind_current_process

    set_kernel_weights({0: 3, 2: 1})
    kw = {"mode": "none", "policy": "weighted-interleave", "environ": {}}
    binding = bind_current_process(0, nprocs=1, weights={0: 3, 2: 1}, **kw)
    try:
        check = binding.verify()
        assert check.ok, check
        assert binding.kernel_weights == {0: 3, 2: 1} and binding.weights_mismatch is None
        placed = [n for n in check.page_nodes]
        assert len(placed) >= 80 and 0.70 <= placed.count(0) / len(placed) <= 0.80
    finally:
        binding.restore()
    binding = bind_current_process(0, nprocs=1, weights={0: 1, 2: 1}, **kw)
    try:
        check = binding.verify()
        assert binding.weights_mismatch is not None
        assert not check.ok and any("its weight 1 of 2 asks for 50.0%" in p for p in check.problems)
        assert any("the kernel's, which the policy follows, are 0:3,2:1" in n for n in check.notes)
    finally:
        binding.restore()


# ------------------------------------------------------ advise: weights from measurement


def test_advise_json_recommends_weights_for_every_memory_node(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``pynumabind advise --quick --json`` here: weights for every memory node, measured.

    Each CPU node's set is its own memory and the memory-only node 2 (node 0: {0, 2}, node 1:
    {1, 2}), so together they give every memory node (0, 1, 2) a weight, proportional to what
    the matrix measured.  Under TCG every node is the same host memory, so each set predicts a
    gain (the bandwidths add up), and weighted interleave is measured: its buffers laid out by
    ``bind_memory``'s runs, with pages on both nodes of the set and nowhere else.  The two CPU
    nodes' sets differ, so no one process-wide weighted-interleave policy is recommended, by the
    rule.  HMAT gives node 2 a quarter of node 1's bandwidth; TCG does not make it slower, so the
    advice notes the disagreement with both figures wherever the measured noise range excludes it.
    The figures are TCG's and mean nothing about a real CXL node: the shape is what is checked.
    """
    import time

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pynumabind", "advise", "--quick", "--json", "--no-latency"],
        capture_output=True, text=True, timeout=400, cwd=REPO_ROOT, env=env, check=False,
    )  # fmt: skip
    took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["schema"] == 3
    cells = data["memory"]["interleave"]
    assert [(c["cpu_node"], sorted(c["weights"])) for c in cells] == [
        (0, ["0", "2"]),
        (1, ["1", "2"]),
    ], cells
    assert set().union(*(c["weights"] for c in cells)) == {"0", "1", "2"}  # every memory node
    bandwidth = data["memory"]["bandwidth_gbs"]
    for cell in cells:
        assert all(1 <= w <= 255 for w in cell["weights"].values()), cell
        assert cell["error"] is None and cell["skipped"] is None, cell
        assert cell["bandwidth_gbs"] > 0 and cell["local_gbs"] > 0, cell
        cpu = cell["cpu_node"]
        row = dict(zip(data["memory"]["memory_nodes"], bandwidth[cpu]))
        assert cell["predicted"] == pytest.approx((row[cpu] + row[2]) / row[cpu]), (cell, row)
        pages = {int(n): c for n, c in cell["placement"]["pages"].items() if c}
        assert set(pages) == {int(n) for n in cell["weights"]}, cell  # both nodes, no other
    rec = data["recommendation"]
    assert rec["policy"] != "weighted-interleave" and rec["weights"] is None, rec
    interleaved = [c for c in rec["comparisons"] if c["better"].startswith("weighted interleave")]
    assert len(interleaved) == 2, rec["comparisons"]
    # HMAT: node 2 has a quarter of node 1's bandwidth; a note when the measurement says not.
    spreads = data["memory"]["bandwidth_spread"][1]
    local, other = spreads[1], spreads[2]
    low, high = other["min"] / local["max"], other["max"] / local["min"]
    notes = [n for n in data["notes"] if n.startswith("HMAT and the measurement disagree")]
    if not low / 1.1 <= 0.25 <= high * 1.1:
        assert len(notes) == 1, data["notes"]
        assert "from CPU node 1: HMAT gives node 2 0.25x" in notes[0], notes
        assert "(5120 vs 20480 MB/s)" in notes[0], notes
    else:  # TCG made node 2 a quarter as fast after all: nothing to note
        assert notes == [], data["notes"]
    # The figures, on the session's output even when the test passes (the benchmark's record:
    # weighted interleave against local bandwidth in this guest, indicative only under TCG).
    lines: List[str] = []
    for cell in data["memory"]["interleave"]:
        weighted, local = cell["bandwidth_spread"], cell["local_spread"]
        lines.append(
            f"advise in the 6.12-hmat guest: CPU node {cell['cpu_node']}: weighted interleave "
            f"{cell['weights']} {weighted['median']:.3g} GB/s "
            f"[{weighted['q1']:.3g}-{weighted['q3']:.3g}] vs local node {cell['local']} "
            f"{local['median']:.3g} GB/s [{local['q1']:.3g}-{local['q3']:.3g}] "
            f"({local['n']} samples each, in turn); predicted {cell['predicted']:.2f}x; "
            f"pages {cell['placement']['pages']}"
        )
    lines.append(f"advise in the 6.12-hmat guest: advise --quick --json took {took:.0f} s")
    lines += [f"advise in the 6.12-hmat guest: {note}" for note in notes]
    with capsys.disabled():  # the session's output shows them (the guest runs pytest -v)
        sys.stdout.write("\n" + "\n".join(lines) + "\n")
