"""bind_memory and memory_on on a real multi-NUMA kernel.

Runs inside the guest booted with ``harness.STANDARD_TOPOLOGY`` (node0 CPUs 0-1, node1 CPUs
2-3, node2 memory only; bochs-displays on node 1 and on node 2).  Where pages are is read
with ``move_pages`` through ``_guestlib.page_nodes`` (an independent query of every page),
not taken from the library's own report, and the thread's policy with ``get_mempolicy``.
Page pinning for DMA is real too: io_uring's buffer registration pins pages the way
``cudaHostRegister`` does (a long-term ``pin_user_pages``).
"""

from __future__ import annotations

import ctypes
import errno
import json
import mmap
import os
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from pynumabind._os import libnuma as _libnuma
from pynumabind._os import pages as _pages
from pynumabind.binding.placement import NOT_ASKED, NOT_MIGRATED, bind_memory, memory_on
from pynumabind.discovery import detect_topology

from ...support.unprivileged import as_nobody
from ._guestlib import (
    PCI_ADDRESS,
    PCI_ADDRESS_NODE2,
    PCI_CLASS,
    PCI_VENDOR,
    check_weights_3_to_1_on_64_mib,
    is_thp,
    nodes_at,
    numa_balancing_hides_pages,
    page_nodes,
    run_python,
)

pytestmark = pytest.mark.usefixtures("pristine")

PAGE = mmap.PAGESIZE
BIG_PAGES = (64 << 20) // PAGE  # a 64 MiB buffer

NR_IO_URING_SETUP = 425  # x86-64, like the rest of the guest
NR_IO_URING_REGISTER = 427
IORING_REGISTER_BUFFERS = 0
IORING_UNREGISTER_BUFFERS = 1
IO_URING_PARAMS_SIZE = 120  # struct io_uring_params


def touched_on(node: int, pages: int, flags: int = mmap.MAP_SHARED) -> mmap.mmap:
    """``pages`` fresh pages, each written while this thread's policy binds to ``node``."""
    region = mmap.mmap(-1, pages * PAGE, flags=flags | mmap.MAP_ANONYMOUS)
    _libnuma.set_mempolicy(_libnuma.MPOL_BIND, {node})
    try:
        region[::PAGE] = b"\1" * pages  # one byte per page, in one C loop (TCG is slow)
    finally:
        _libnuma.set_mempolicy(_libnuma.MPOL_DEFAULT)
    assert page_nodes(region) == [node] * pages
    return region


def address_of(buffer: mmap.mmap) -> int:
    ffi = _libnuma._ffi()
    pointer = ffi.from_buffer(buffer)
    try:
        return int(ffi.cast("uintptr_t", pointer))
    finally:
        ffi.release(pointer)


@pytest.fixture
def process_on_node0() -> Iterator[None]:
    """The process's own policy binds to node 0 (as a worker bound there has)."""
    _libnuma.set_mempolicy(_libnuma.MPOL_BIND, {0})
    try:
        yield
    finally:
        _libnuma.set_mempolicy(_libnuma.MPOL_DEFAULT)


def fresh_nodes(pages: int = 16) -> List[int]:
    region = mmap.mmap(-1, pages * PAGE)
    try:
        for index in range(pages):
            region[index * PAGE] = 1
        return page_nodes(region)
    finally:
        region.close()


# ------------------------------------------------------------------ bind_memory


def test_64_mib_touched_on_node0_moves_entirely_to_node1() -> None:
    region = touched_on(0, BIG_PAGES)
    try:
        result = bind_memory(region, node=1)
        assert page_nodes(region) == [1] * BIG_PAGES  # 100% on node 1, page by page
        assert result.pages == BIG_PAGES and result.size == 64 << 20
        assert result.pages_per_node == {1: BIG_PAGES}
        assert result.complete and not result.not_moved and result.not_present == 0
    finally:
        region.close()


def test_weights_3_to_1_leave_three_quarters_of_64_mib_on_node_0() -> None:
    """Exact weights need no weighted interleave in the kernel: this one (6.1) has none."""
    check_weights_3_to_1_on_64_mib()


def test_a_memory_only_node_takes_the_pages_too() -> None:
    region = touched_on(0, 32)
    try:
        result = bind_memory(region, node=2)
        assert page_nodes(region) == [2] * 32
        assert result.pages_per_node == {2: 32}
    finally:
        region.close()


def test_move_false_leaves_pages_and_places_the_untouched_ones() -> None:
    region = mmap.mmap(-1, 32 * PAGE)
    try:
        _libnuma.set_mempolicy(_libnuma.MPOL_BIND, {0})
        try:
            for index in range(16):  # the first half only
                region[index * PAGE] = 1
        finally:
            _libnuma.set_mempolicy(_libnuma.MPOL_DEFAULT)
        result = bind_memory(region, node=1, move=False)
        assert result.pages_per_node == {0: 16} and result.not_present == 16
        assert result.not_moved == {NOT_ASKED: 16} and not result.complete
        for index in range(16, 32):  # touched after the bind: the range's policy places them
            region[index * PAGE] = 1
        assert page_nodes(region) == [0] * 16 + [1] * 16
    finally:
        region.close()


def test_interleave_spreads_a_node0_buffer_over_two_other_nodes() -> None:
    region = touched_on(0, 64)
    try:
        result = bind_memory(region, node="1-2", policy="interleave")
        where = page_nodes(region)
        assert set(where) == {1, 2} and 16 <= where.count(1) <= 48
        assert result.pages_per_node == {1: where.count(1), 2: where.count(2)}
        assert result.complete
    finally:
        region.close()


def test_pages_already_on_one_of_the_nodes_stay() -> None:
    """MPOL_MF_MOVE moves only pages off the policy's nodes: interleaving node-0 pages over
    0-1 does not re-spread them (the kernel's rule, documented in the module docstring)."""
    region = touched_on(0, 32)
    try:
        result = bind_memory(region, node="0-1", policy="interleave")
        assert page_nodes(region) == [0] * 32
        assert result.pages_per_node == {0: 32} and result.complete
    finally:
        region.close()


def test_gpu_places_by_the_planner_rules_on_a_real_kernel() -> None:
    topology = detect_topology(
        use_nvml=False, gpu_vendors={PCI_VENDOR: "qemu"}, pci_classes=[PCI_CLASS]
    )
    assert [g.pci_bus_id for g in topology.gpus] == [PCI_ADDRESS, PCI_ADDRESS_NODE2]
    for index in (0, 1):
        # GPU 1 sits on memory-only node 2 (a Grace GPU's HBM node): its host memory is node
        # 1's, the nearest CPU node (distance 30 < 40), not the device's node 2.
        region = touched_on(0, 16)
        try:
            result = bind_memory(region, gpu=index, topology=topology)
            assert result.nodes == frozenset({1}), result.reasons
            assert page_nodes(region) == [1] * 16
        finally:
            region.close()


def test_mlocked_pages_move() -> None:
    """mlock keeps pages resident, not in place: Linux migrates locked pages."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mlock.argtypes = libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    region = touched_on(0, 32)
    address = address_of(region)
    assert libc.mlock(address, 32 * PAGE) == 0, os.strerror(ctypes.get_errno())
    try:
        result = bind_memory(region, node=1)
        assert page_nodes(region) == [1] * 32 and result.complete
    finally:
        libc.munlock(address, 32 * PAGE)
        region.close()


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


def pin_with_io_uring(address: int, length: int) -> int:
    """Register ``[address, address+length)`` as an io_uring fixed buffer: the pages are pinned
    (``pin_user_pages(FOLL_LONGTERM)``, as ``cudaHostRegister`` does) until :func:`unpin`."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    params = (ctypes.c_ubyte * IO_URING_PARAMS_SIZE)()
    fd = libc.syscall(ctypes.c_long(NR_IO_URING_SETUP), ctypes.c_long(4), params)
    assert fd >= 0, f"io_uring_setup: {os.strerror(ctypes.get_errno())}"
    vector = IoVec(address, length)
    done = libc.syscall(
        ctypes.c_long(NR_IO_URING_REGISTER),
        ctypes.c_long(fd),
        ctypes.c_long(IORING_REGISTER_BUFFERS),
        ctypes.byref(vector),
        ctypes.c_long(1),
    )
    if done != 0:
        err = ctypes.get_errno()
        os.close(fd)
        raise AssertionError(f"io_uring_register(BUFFERS): {os.strerror(err)}")
    return int(fd)


def unpin(fd: int) -> None:
    """Unregister the buffers now (closing the ring alone unpins later, from a workqueue)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    done = libc.syscall(
        ctypes.c_long(NR_IO_URING_REGISTER),
        ctypes.c_long(fd),
        ctypes.c_long(IORING_UNREGISTER_BUFFERS),
        None,
        ctypes.c_long(0),
    )
    os.close(fd)
    assert done == 0, f"io_uring_register(UNREGISTER_BUFFERS): {os.strerror(ctypes.get_errno())}"


def test_pinned_pages_stay_and_the_result_says_why() -> None:
    region = touched_on(0, 64)
    fd = pin_with_io_uring(address_of(region), 64 * PAGE)
    try:
        result = bind_memory(region, node=1)
        assert page_nodes(region) == [0] * 64  # the kernel could not move a pinned page
        assert result.pages_per_node == {0: 64} and not result.complete and result.pinned
        # Linux 6.1 reports these only as a count (no per-page errno); a kernel that says
        # EBUSY per page is reported as EBUSY.  Either way every page is accounted for.
        assert sum(result.not_moved.values()) == 64
        assert set(result.not_moved) <= {NOT_MIGRATED, "EBUSY"}, result.not_moved
        assert any("memory_on" in note for note in result.notes)
        assert "cannot be moved" in " ".join(result.notes)
    finally:
        unpin(fd)
    try:
        again = bind_memory(region, node=1)
        assert page_nodes(region) == [1] * 64 and again.complete
    finally:
        region.close()


def test_pages_shared_with_another_process_stay_with_eacces() -> None:
    """After a fork both processes map the (private, copy-on-write) pages: MPOL_MF_MOVE leaves
    them, move_pages says EACCES for each (moving them needs MPOL_MF_MOVE_ALL and CAP_SYS_NICE).
    A shared anonymous mapping would not do: fork does not copy its page table entries."""
    region = touched_on(0, 16, mmap.MAP_PRIVATE)
    ready, release = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child only holds the mapping until told
        os.read(ready, 1)
        os._exit(0)
    try:
        result = bind_memory(region, node=1)
        assert page_nodes(region) == [0] * 16
        assert result.not_moved == {"EACCES": 16} and not result.complete and not result.pinned
        assert "MOVE_ALL" in result.summary()
    finally:
        os.write(release, b"x")
        os.waitpid(child, 0)
        os.close(ready)
        os.close(release)
    try:
        alone = bind_memory(region, node=1)  # mapped once again: it moves
        assert page_nodes(region) == [1] * 16 and alone.complete
    finally:
        region.close()


# -------------------------------------------------------------------- memory_on


def test_memory_on_node1_allocates_there_while_the_process_is_on_node0(
    process_on_node0: None,
) -> None:
    assert fresh_nodes() == [0] * 16
    with memory_on(node=1) as scope:
        inside = fresh_nodes()
        policy_inside = _libnuma.get_mempolicy()
        keep = mmap.mmap(-1, 8 * PAGE)  # mapped inside, written after the block
        keep[0] = 1
    after = _libnuma.get_mempolicy()
    assert inside == [1] * 16
    assert (policy_inside.mode, policy_inside.nodes) == (_libnuma.MPOL_BIND, frozenset({1}))
    assert scope.nodes == frozenset({1})
    assert (after.mode, after.nodes) == (_libnuma.MPOL_BIND, frozenset({0}))  # back on node 0
    assert fresh_nodes() == [0] * 16
    keep[PAGE] = 1  # first touch after the block: the thread's policy now, node 0
    assert page_nodes(keep)[:2] == [1, 0]
    keep.close()


def test_memory_on_restores_after_an_exception_on_a_real_kernel(process_on_node0: None) -> None:
    with pytest.raises(RuntimeError, match="inside"), memory_on(node=2):
        assert fresh_nodes(4) == [2] * 4
        raise RuntimeError("inside")
    now = _libnuma.get_mempolicy()
    assert (now.mode, now.nodes) == (_libnuma.MPOL_BIND, frozenset({0}))
    assert fresh_nodes(4) == [0] * 4


def test_memory_on_by_gpu_allocates_on_its_memory_node(process_on_node0: None) -> None:
    topology = detect_topology(
        use_nvml=False, gpu_vendors={PCI_VENDOR: "qemu"}, pci_classes=[PCI_CLASS]
    )
    with memory_on(gpu=1, topology=topology, policy="preferred") as scope:
        assert scope.kernel_policy == "MPOL_PREFERRED" and scope.nodes == frozenset({1})
        assert fresh_nodes() == [1] * 16
    assert fresh_nodes() == [0] * 16


# -------------------------------------------------------- a real cpuset.mems


_CONFINED_CHILD = """
import json, os, sys
with open(sys.argv[1] + "/cgroup.procs", "w") as handle:
    handle.write(str(os.getpid()))  # this process joins the group (cpuset.mems=0)

from pynumabind import PynumabindError
from pynumabind._os import libnuma as _libnuma
from pynumabind._os import pages as _pages
from pynumabind.discovery import detect_topology
from pynumabind.binding.placement import bind_memory, memory_on

def attempt(call):
    try:
        call()
    except PynumabindError as exc:
        return [type(exc).__name__, getattr(exc, "errno", None), str(exc)]
    return None

region = bytearray(b"\\1" * 8192)  # written: every page present
claims = detect_topology(use_nvml=False).replace(allowed_mems=frozenset({0, 1, 2}))
report = {
    "bind": attempt(lambda: bind_memory(region, node=1)),
    "memory_on": attempt(lambda: memory_on(node=1)),
    "kernel": attempt(lambda: bind_memory(region, node=1, topology=claims)),
    "within": bind_memory(region, node=0).to_dict(),
    "policy": _libnuma.get_mempolicy().kernel_policy,
}
print(json.dumps(report))
"""


@pytest.fixture
def mems0_cgroup() -> Iterator[Path]:
    """A cgroup v2 group whose cpuset.mems is node 0 only."""
    root = Path("/sys/fs/cgroup")
    group = root / "pynumabind-mems0"
    (root / "cgroup.subtree_control").write_text("+cpuset")
    group.mkdir(exist_ok=True)
    try:
        (group / "cpuset.mems").write_text("0")
        assert (group / "cpuset.mems.effective").read_text().strip() == "0"
        yield group
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            (root / "cgroup.procs").write_text(pid)
        group.rmdir()


def test_nodes_outside_cpuset_mems_are_refused_by_name(mems0_cgroup: Path) -> None:
    report = run_python(_CONFINED_CHILD, [str(mems0_cgroup)])
    for key in ("bind", "memory_on"):
        kind, _err, message = report[key]
        assert kind == "PlanError", report
        assert "node= names node(s) 1 outside this process's allowed memory nodes 0" in message
    kind, err, message = report["kernel"]  # the check passed on a false topology: the kernel says
    assert (kind, err) == ("PlacementSyscallError", errno.EINVAL), report
    assert "allowed memory nodes" in message
    within = report["within"]  # a bytearray is not page-aligned: 2 or 3 pages, all on node 0
    # No page anywhere but node 0.  This test runs with transparent huge pages, and with NUMA
    # balancing on in one session, so a written page can read as not present (its huge page
    # being split, or the page being migrated); bind_memory asks again before counting it
    # so (seen twice in full CI runs before it did).  Every page is accounted for.
    shown = json.dumps(within)
    assert set(within["pages_per_node"]) == {"0"}, shown
    assert set(within["not_moved"]) <= {"vanished"}, shown
    accounted = within["pages_per_node"]["0"] + within["not_present"]
    assert accounted + within["not_moved"].get("vanished", 0) == within["pages"], shown
    assert report["policy"] == "MPOL_DEFAULT"


# ----------------------------------------------- bind_memory and transparent huge pages


def huge_page_on(node: int) -> Tuple[mmap.mmap, int]:
    """A mapping holding one transparent huge page written on ``node``; (mapping, its address)."""
    huge = _libnuma.huge_page_size()
    assert huge > PAGE, "this guest kernel has transparent huge pages"
    region = mmap.mmap(-1, 3 * huge, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    offset = -address_of(region) % huge
    region.madvise(mmap.MADV_HUGEPAGE, offset, huge)
    _libnuma.set_mempolicy(_libnuma.MPOL_BIND, {node})
    try:
        region[offset : offset + huge : PAGE] = b"\1" * (huge // PAGE)
    finally:
        _libnuma.set_mempolicy(_libnuma.MPOL_DEFAULT)
    first = address_of(region) + offset
    assert is_thp(first) and is_thp(first + huge - PAGE), "one huge page was allocated"
    return region, first


def nodes_from(first: int, count: int) -> List[int]:
    """Node of each of ``count`` pages from ``first`` (the tests' own oracle, ``nodes_at``)."""
    return nodes_at([first + i * PAGE for i in range(count)])


def test_a_range_inside_a_huge_page_moves_alone() -> None:
    region, first = huge_page_on(0)
    huge_pages = _libnuma.huge_page_size() // PAGE
    try:
        result = bind_memory((first + 100 * PAGE, 2 * PAGE), node=1)
        assert nodes_from(first, huge_pages) == [0] * 100 + [1, 1] + [0] * (huge_pages - 102)
        assert result.pages_per_node == {1: 2} and result.complete
        assert result.moved_outside == 0 and "outside" not in result.summary()
    finally:
        region.close()


def test_two_halves_of_a_huge_page_bound_to_two_nodes_stay_apart() -> None:
    region, first = huge_page_on(0)
    half = _libnuma.huge_page_size() // PAGE // 2
    try:
        low = bind_memory((first, half * PAGE), node=1)
        high = bind_memory((first + half * PAGE, half * PAGE), node=2)
        assert nodes_from(first, 2 * half) == [1] * half + [2] * half  # the first half stayed
        assert low.complete and high.complete and low.moved_outside == high.moved_outside == 0
    finally:
        region.close()


def test_a_huge_page_that_cannot_be_split_moves_whole_and_the_result_says_so() -> None:
    """An mlock-ed huge page is not split (MADV_COLD refuses locked memory); the kernel
    migrates it whole, and the result counts the pages outside the range that moved."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mlock.argtypes = libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    region, first = huge_page_on(0)
    huge = _libnuma.huge_page_size()
    assert libc.mlock(first, huge) == 0, os.strerror(ctypes.get_errno())
    try:
        result = bind_memory((first + 100 * PAGE, 2 * PAGE), node=1)
        where = nodes_from(first, huge // PAGE)
        moved = sum(1 for i, n in enumerate(where) if n == 1 and not 100 <= i < 102)
        assert result.pages_per_node == {1: 2} and result.complete
        assert moved > 0 and result.moved_outside == moved, (moved, result.summary())
        assert f"{moved} pages outside the range moved with it" in result.summary()
        assert any("could not split" in note for note in result.notes), result.notes
    finally:
        libc.munlock(first, huge)
        region.close()


def setup(ok: bool, what: str) -> None:
    """A test's setup, checked with ``RuntimeError``: a setup that did not happen is no
    failure of the product (nor, were the test marked xfail, its expected failure)."""
    if not ok:
        raise RuntimeError(f"setup failed: {what}")


HINTING_WAIT = 60.0  # seconds of this thread on a CPU; the balancer came within 1-2 s here


def wait_until_the_balancer_samples(addresses: List[int]) -> float:
    """Stay on the CPU until ``move_pages`` reads all of ``addresses`` as not present.

    With automatic NUMA balancing on, the kernel's scanner marks this process's pages for a
    NUMA-hinting fault (PROT_NONE) every scan period of the CPU time it runs; 6.1's
    ``move_pages`` then reports them as not present until they are touched.  The scan runs
    from the scheduler tick of a running task, so this spins instead of sleeping.  Seconds
    waited; ``RuntimeError`` (a setup that did not happen, not an assertion) if the balancer
    never came.
    """
    began = time.monotonic()
    while time.monotonic() - began < HINTING_WAIT:
        _, status = _libnuma.move_pages_status(addresses)
        if all(where < 0 for where in status):
            return time.monotonic() - began
        sum(range(200_000))  # a few ms on the CPU between looks
    raise RuntimeError(
        f"NUMA balancing is on, but in {HINTING_WAIT:.0f} s its scanner never marked the huge "
        "page for a hinting fault: the defect's setup did not happen"
    )


def test_a_range_inside_a_huge_page_the_balancer_sampled_moves_alone() -> None:
    """Two pages inside the second huge page of an 8 MiB ``MADV_HUGEPAGE`` mapping written on
    node 0 are bound to node 1: they move alone, or the result counts what moved with them.

    With balancing on (the kernel's default on multi-node machines) the huge page is first
    left long enough for the balancer to sample it, as any buffer a worker keeps is; with it
    off this is the plain case.  Under balancing on 6.1 this failed 6 times in 6 before the
    census read the page table too: ``move_pages`` read the sampled huge page as absent, so
    no neighbour was seen, the huge page was not split, and all 512 pages moved, with
    ``moved_outside`` 0."""
    huge = _libnuma.huge_page_size()
    count = huge // PAGE
    setup(huge > PAGE, "this guest kernel has transparent huge pages")
    region = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        region.madvise(mmap.MADV_HUGEPAGE)
        _libnuma.set_mempolicy(_libnuma.MPOL_BIND, {0})
        try:
            region[::PAGE] = b"\1" * (len(region) // PAGE)
        finally:
            _libnuma.set_mempolicy(_libnuma.MPOL_DEFAULT)
        second = address_of(region) + -address_of(region) % huge + huge
        setup(second + huge <= address_of(region) + len(region), "a whole second huge page")
        setup(is_thp(second) is is_thp(second + huge - PAGE) is True, "a huge page was allocated")
        if numa_balancing_hides_pages():
            wait_until_the_balancer_samples([second + i * PAGE for i in range(count)])
        result = bind_memory((second + 64 * PAGE, 2 * PAGE), node=1)
        where = nodes_from(second, count)
        outside = sum(1 for i, node in enumerate(where) if node == 1 and not 64 <= i < 66)
        assert where[64:66] == [1, 1] and result.pages_per_node == {1: 2}, result.summary()
        assert result.moved_outside == outside, (
            f"{outside} pages outside the range moved to node 1, the result says "
            f"{result.moved_outside}: {result.summary()}"
        )
        assert where == [0] * 64 + [1, 1] + [0] * (count - 66), result.summary()
    finally:
        region.close()


# ------------------------------------------- every census, on pages the balancer sampled


def hidden_region_on(node: int) -> Tuple[mmap.mmap, int, int]:
    """An 8 MiB ``MADV_HUGEPAGE`` mapping written on ``node``, between two inaccessible guard
    pages (so it is a mapping of its own: nothing merges across them), that the balancer has
    sampled where it hides pages; (the mapping, its first written page, its written length).
    """
    length = 8 << 20
    region = mmap.mmap(-1, length + 2 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region.madvise(mmap.MADV_HUGEPAGE)
    start = address_of(region)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for guard in (start, start + length + PAGE):
        setup(libc.mprotect(guard, PAGE, 0) == 0, "a PROT_NONE guard page")
    _libnuma.set_mempolicy(_libnuma.MPOL_BIND, {node})
    try:
        region[PAGE : length + PAGE : PAGE] = b"\1" * (length // PAGE)
    finally:
        _libnuma.set_mempolicy(_libnuma.MPOL_DEFAULT)
    body = start + PAGE
    if numa_balancing_hides_pages():
        huge = _libnuma.huge_page_size()
        second = body + -body % huge + huge
        wait_until_the_balancer_samples([second + i * PAGE for i in range(huge // PAGE)])
    return region, body, length


def every_census_of_hidden_pages() -> Dict[str, Any]:
    """verify()'s page census, advise's placement and bind_memory's, on pages written on
    node 1 that the balancer sampled; and the kernel's own count of the mapping afterwards
    (``numa_maps``, read here).  Run as root and as nobody (no frame numbers)."""
    from pynumabind.advisor._harness import placement
    from pynumabind.binding._verify import page_nodes as verify_page_nodes

    region, body, length = hidden_region_on(1)
    try:
        pages = length // PAGE
        huge = _libnuma.huge_page_size()
        second = body + -body % huge + huge
        _, raw = _libnuma.move_pages_status([second + i * PAGE for i in range(huge // PAGE)])
        seen: Dict[str, Any] = {"pages": pages, "missed": sum(1 for s in raw if s < 0)}
        seen["verify"] = list(verify_page_nodes(region))[1:-1]  # less the two guards
        seen["advise"] = placement(body, length, 1).to_dict()
        seen["bind"] = bind_memory((body, length), node=1).to_dict()
        seen["inside"] = bind_memory((second + 64 * PAGE, 2 * PAGE), node=0).to_dict()
        seen["kernel"] = numa_maps_pages(body, body + length)
        return seen
    finally:
        region.close()


def numa_maps_pages(start: int, end: int) -> Dict[str, int]:
    """Pages per node of the mappings starting in ``[start, end)``, from ``numa_maps``."""
    counts: Dict[str, int] = {}
    with open("/proc/self/numa_maps", encoding="ascii") as handle:
        for line in handle:
            fields = line.split()
            if not start <= int(fields[0], 16) < end:
                continue
            for field in fields[1:]:
                name, _, value = field.partition("=")
                if name[:1] == "N" and name[1:].isdigit():
                    counts[name[1:]] = counts.get(name[1:], 0) + int(value)
    return counts


@pytest.mark.parametrize("who", ["root", "nobody"])
def test_every_census_counts_the_pages_the_balancer_sampled(who: str) -> None:
    """Under balancing, 6.1's move_pages reads every page of a sampled huge page as absent.
    verify()'s page census and advise's placement find them on node 1 (root: by their
    frames; nobody: present, node unknown, or by the mapping's numa_maps), never absent;
    bind_memory counts them on node 1, and a range inside moves alone."""
    census = every_census_of_hidden_pages
    seen = census() if who == "root" else as_nobody(census)
    pages = seen["pages"]
    if numa_balancing_hides_pages():
        setup(seen["missed"] == _libnuma.huge_page_size() // PAGE, "the balancer hid the page")
    unknown = {_pages.UNLOCATED, _pages.UNSURE}
    if who == "root":
        assert seen["verify"] == [1] * pages
    else:
        assert set(seen["verify"]) <= {1} | unknown, sorted(set(seen["verify"]))
    assert seen["advise"]["fraction"] == 1.0, seen["advise"]
    whole = seen["bind"]
    assert whole["pages_per_node"] == {"1": pages} and whole["complete"], whole
    assert whole["not_present"] == whole["not_located"] == 0, whole
    inside = seen["inside"]
    assert inside["pages_per_node"] == {"0": 2} and inside["complete"], inside
    assert inside["moved_outside"] == 0, inside
    assert seen["kernel"] == {"0": 2, "1": pages - 2}, seen["kernel"]  # the neighbours stayed


# ------------------------------------------------------------ bind_memory, a full node


HUGETLB_NODE2 = Path("/sys/devices/system/node/node2/hugepages/hugepages-2048kB/nr_hugepages")


@pytest.fixture
def node2_full() -> Iterator[int]:
    """Node 2's memory taken by hugetlb pages (no process owns them, so no OOM kill); its
    free memory left, in bytes.  Given back afterwards."""
    HUGETLB_NODE2.write_text("1024")  # far more than 256 MiB: the kernel takes what it can
    try:
        assert int(HUGETLB_NODE2.read_text()) > 0
        meminfo = Path("/sys/devices/system/node/node2/meminfo").read_text()
        free_kb = int(next(line for line in meminfo.splitlines() if "MemFree" in line).split()[3])
        yield free_kb * 1024
    finally:
        HUGETLB_NODE2.write_text("0")


def test_a_full_node_keeps_the_counts_and_lists_the_pages_under_enomem(node2_full: int) -> None:
    pages = BIG_PAGES  # 64 MiB, far more than node 2 has left
    assert node2_full < pages * PAGE // 2, node2_full
    region = touched_on(0, pages)
    try:
        result = bind_memory(region, node=2)
        where = page_nodes(region)
        assert result.pages_per_node == {n: where.count(n) for n in set(where)}, result.summary()
        assert where.count(0) > pages // 2  # most could not go
        assert result.not_moved.get("ENOMEM", 0) == where.count(0), result.summary()
        assert sum(result.pages_per_node.values()) == pages and not result.complete
        assert any(note.startswith("node 2 is full: ") for note in result.notes), result.notes
        assert "max_map_count" not in " ".join(result.notes)
    finally:
        region.close()


# ------------------------------------------------------- memory_on, cpuset mems change


_CPUSET_CHANGE_CHILD = """
import json, os, sys, warnings
group = sys.argv[1]
with open(group + "/cgroup.procs", "w") as handle:
    handle.write(str(os.getpid()))  # this process joins the group (cpuset.mems=0-2)

from pynumabind._os import libnuma as _libnuma
from pynumabind._os import pages as _pages
from pynumabind.binding.placement import memory_on

def mems(text):
    with open(group + "/cpuset.mems", "w") as handle:
        handle.write(text)

def policy():
    now = _libnuma.get_mempolicy()
    return [now.kernel_policy, sorted(now.nodes)]

def leave_after(saved_mode, saved_nodes, new_mems):
    mems("0-2")
    _libnuma.set_mempolicy(saved_mode, set(saved_nodes))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with memory_on(node=0, policy="preferred"):
            inside = policy()
            mems(new_mems)  # the cpuset changes during the block
    return {"inside": inside, "after": policy(), "warnings": [str(w.message) for w in caught]}

report = {
    "none_allowed": leave_after(_libnuma.MPOL_BIND, {1, 2}, "0"),
    "part_allowed": leave_after(_libnuma.MPOL_INTERLEAVE, {1, 2}, "0,2"),
}
_libnuma.set_mempolicy(_libnuma.MPOL_DEFAULT)
print(json.dumps(report))
"""


@pytest.fixture
def all_mems_cgroup() -> Iterator[Path]:
    """A cgroup v2 group with cpuset.mems 0-2, which a child joins and then narrows."""
    root = Path("/sys/fs/cgroup")
    group = root / "pynumabind-mems-change"
    (root / "cgroup.subtree_control").write_text("+cpuset")
    group.mkdir(exist_ok=True)
    try:
        (group / "cpuset.mems").write_text("0-2")
        yield group
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            (root / "cgroup.procs").write_text(pid)
        group.rmdir()


def test_a_cpuset_change_during_a_block_restores_the_nearest_allowed_policy(
    all_mems_cgroup: Path,
) -> None:
    report = run_python(_CPUSET_CHANGE_CHILD, [str(all_mems_cgroup)])
    gone = report["none_allowed"]  # BIND on 1-2 before, mems now 0: nothing of it allowed
    assert gone["inside"] == ["MPOL_PREFERRED", [0]]
    # The kernel refuses BIND on 1-2 (EINVAL); its own remapping of 1-2 onto node 0 is put
    # back, never the block's MPOL_PREFERRED, and one warning says so.
    assert gone["after"] == ["MPOL_BIND", [0]], report
    assert len(gone["warnings"]) == 1, report
    assert "MPOL_BIND on node 1-2" in gone["warnings"][0]
    assert "allowed memory nodes are now 0, were 0-2" in gone["warnings"][0]
    part = report["part_allowed"]  # INTERLEAVE on 1-2 before, mems now 0,2: the kernel keeps 2
    assert part["after"] == ["MPOL_INTERLEAVE", [2]] and part["warnings"] == [], report
