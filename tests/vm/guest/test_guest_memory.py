"""bind_memory and memory_on on a real multi-NUMA kernel (issue 21 section 2).

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
from pathlib import Path
from typing import Iterator, List

import pytest

from pynumabind._os import libnuma as _libnuma
from pynumabind.binding.placement import NOT_ASKED, NOT_MIGRATED, bind_memory, memory_on
from pynumabind.discovery import detect_topology

from ._guestlib import (
    PCI_ADDRESS,
    PCI_ADDRESS_NODE2,
    PCI_CLASS,
    PCI_VENDOR,
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
        assert scope.mode == "MPOL_PREFERRED" and scope.nodes == frozenset({1})
        assert fresh_nodes() == [1] * 16
    assert fresh_nodes() == [0] * 16


# -------------------------------------------------------- a real cpuset.mems


_CONFINED_CHILD = """
import json, os, sys
with open(sys.argv[1] + "/cgroup.procs", "w") as handle:
    handle.write(str(os.getpid()))  # this process joins the group (cpuset.mems=0)

from pynumabind import PynumabindError
from pynumabind._os import libnuma as _libnuma
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
    "policy": _libnuma.get_mempolicy().mode_name,
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
    # No page anywhere but node 0.  This guest runs with transparent huge pages and NUMA
    # balancing on, so a written page can read as not present for a moment (its huge page
    # being split, or the page being migrated); bind_memory asks again before counting it
    # so (seen twice in full CI runs before it did).  Every page is accounted for.
    shown = json.dumps(within)
    assert set(within["pages_per_node"]) == {"0"}, shown
    assert set(within["not_moved"]) <= {"vanished"}, shown
    accounted = within["pages_per_node"]["0"] + within["not_present"]
    assert accounted + within["not_moved"].get("vanished", 0) == within["pages"], shown
    assert report["policy"] == "MPOL_DEFAULT"
