"""Where a page is when ``move_pages`` says it is not there (``pynumabind._os.pages``), for real.

This machine's kernel reports every page it holds (one node, no NUMA
balancing), so ``move_pages`` missing a page is stood in for by handing
:func:`locate` a negative status for pages that are really there: everything
it then reads is real -- ``/proc/self/pagemap``, ``/proc/kpageflags``, the
memory blocks in sysfs, ``/proc/self/numa_maps`` -- as root (frame numbers
shown) and as ``nobody`` in a forked child (no frame numbers).  The real
thing, pages the balancer marked on Linux 6.1, is tested in the QEMU guest
(``tests/vm/guest/test_guest_memory.py``).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from pynumabind._os import libnuma as _libnuma
from pynumabind._os import pages as _pages
from pynumabind._os import proc as _proc

from ..support.unprivileged import as_nobody, can_drop_root

PAGE = mmap.PAGESIZE
ENOENT, EFAULT = -errno.ENOENT, -errno.EFAULT
PROT_NONE = 0

needs_root = pytest.mark.skipif(not can_drop_root(), reason="frames and kpageflags need root")


def address_of(region: mmap.mmap) -> int:
    anchor = ctypes.c_char.from_buffer(region)
    try:
        return ctypes.addressof(anchor)
    finally:
        del anchor


def pages_of(region: mmap.mmap) -> List[int]:
    start = address_of(region)
    return list(range(start, start + len(region), PAGE))


@pytest.fixture
def written() -> Iterator[mmap.mmap]:
    """Eight private pages, each written (this process alone maps them)."""
    region = mmap.mmap(-1, 8 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region[::PAGE] = b"\1" * 8
    yield region
    region.close()


def node_of_this_machine() -> int:
    _, status = _libnuma.move_pages_status([address_of(mmap.mmap(-1, PAGE))])
    return 0 if status[0] < 0 else status[0]


# ------------------------------------------------------------------ as root


@needs_root
def test_a_present_page_move_pages_missed_is_placed_by_its_frame(written: mmap.mmap) -> None:
    addresses = pages_of(written)
    _, truth = _libnuma.move_pages_status(addresses)  # the kernel's own answer
    assert min(truth) >= 0
    located = _pages.locate(addresses, [ENOENT] * 4 + [EFAULT] * 4)
    assert located.status == tuple(truth) and located.unchecked == 0


@needs_root
def test_a_page_not_there_and_the_zero_page_stay_not_there() -> None:
    region = mmap.mmap(-1, 4 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        assert region[0] == 0  # a read maps the shared zero page, which is no page of ours
        first, untouched = pages_of(region)[:2]
        assert _proc.pagemap([first])[0] >> 63 == 1  # the page table maps it...
        located = _pages.locate([first, untouched], [EFAULT, EFAULT])
        assert located.status == (EFAULT, EFAULT)  # ...and it is still not present
    finally:
        region.close()


def test_only_negative_statuses_are_looked_up(written: mmap.mmap) -> None:
    addresses = pages_of(written)
    assert _pages.locate(addresses, [7] * 8).status == (7,) * 8  # not read, not changed


def test_the_frame_nodes_are_the_memory_blocks_of_each_node() -> None:
    size, blocks = _pages.frame_nodes()
    assert size > 0 and size % PAGE == 0
    nodes = [int(n[4:]) for n in os.listdir(_pages.NODES) if n[:4] == "node" and n[4:].isdigit()]
    assert blocks and set(blocks.values()) <= set(nodes)


def test_the_balancing_switch_reads_as_the_file_says() -> None:
    try:
        with open(_pages.BALANCING, encoding="ascii") as handle:
            text = handle.read().strip()
    except OSError:
        assert _pages.balancing() is None
        return
    assert _pages.balancing() is (text != "0")


# ---------------------------------------------------------- as nobody (no frames)


def _unprivileged_view() -> Dict[str, Any]:
    mine = mmap.mmap(-1, 4 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    mine[::PAGE] = b"\1" * 4  # written here: this process alone maps them
    zero = mmap.mmap(-1, 2 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    assert zero[0] == 0  # the shared zero page, mapped by this read
    own = pages_of(mine)
    zero_page, untouched = pages_of(zero)
    return {
        "frame": _proc.pagemap(own)[0] & ((1 << 55) - 1),
        "own": list(_pages.locate(own, [ENOENT, EFAULT, ENOENT, EFAULT]).status),
        "zero": list(_pages.locate([zero_page, untouched], [EFAULT, EFAULT]).status),
        # A present page move_pages calls -ENOENT is never the zero page (that reads -EFAULT).
        "zero_as_enoent": list(_pages.locate([zero_page], [ENOENT]).status),
    }


@needs_root
def test_without_frames_a_page_of_its_own_is_unlocated_never_not_there() -> None:
    seen = as_nobody(_unprivileged_view)
    assert seen["frame"] == 0  # the kernel shows no frame number to nobody
    assert seen["own"] == [_pages.UNLOCATED] * 4
    # The zero page, mapped by more than this process, could be a shared page the
    # balancer marked: unsure; a page never touched stays not there.
    assert seen["zero"] == [_pages.UNSURE, EFAULT]
    assert seen["zero_as_enoent"] == [_pages.UNLOCATED]


def _unreadable_pagemap() -> Tuple[List[int], int, str]:
    region = mmap.mmap(-1, 2 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region[::PAGE] = b"\1" * 2
    located = _pages.locate(pages_of(region), [ENOENT, 0])
    return list(located.status), located.unchecked, located.why


@needs_root
def test_an_unreadable_pagemap_leaves_the_statuses_and_says_so() -> None:
    # Changing ids makes a process undumpable: its /proc/self files are root's then.
    status, unchecked, why = as_nobody(_unreadable_pagemap, dumpable=False)
    assert status == [ENOENT, 0] and unchecked == 1
    assert _proc.PAGEMAP in why and "EACCES" in why


# ------------------------------------------------------------ numa_maps by mapping


@pytest.fixture
def bound_middle() -> Iterator[Tuple[int, int]]:
    """Pages 1-4 of six written, 2-3 with a policy of their own; 0 and 5 inaccessible guards.

    The guards (``PROT_NONE``: other flags) keep the mappings from merging with
    whatever lies around them, so the mappings are exactly [1], [2, 3], [4].
    """
    region = mmap.mmap(-1, 6 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region[PAGE : 5 * PAGE : PAGE] = b"\1" * 4
    start = address_of(region)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for guard in (start, start + 5 * PAGE):
        assert libc.mprotect(guard, PAGE, PROT_NONE) == 0, ctypes.get_errno()
    node = node_of_this_machine()
    _libnuma.mbind_range(start + 2 * PAGE, 2 * PAGE, _libnuma.MPOL_BIND, {node})
    yield start, node
    region.close()


def test_a_run_of_whole_mappings_gets_its_pages_per_node(bound_middle: Tuple[int, int]) -> None:
    start, node = bound_middle
    assert _proc.mapping_node_pages(start + 2 * PAGE, start + 4 * PAGE) == {node: 2}
    assert _proc.mapping_node_pages(start + PAGE, start + 5 * PAGE) == {node: 4}


def test_a_range_that_is_not_whole_mappings_gets_none(bound_middle: Tuple[int, int]) -> None:
    start, _ = bound_middle
    assert _proc.mapping_node_pages(start + 2 * PAGE, start + 3 * PAGE) is None  # half of one
    assert _proc.mapping_node_pages(start + 3 * PAGE, start + 5 * PAGE) is None  # and a whole


def test_numa_maps_counts_huge_pages_in_pages_of_this_size() -> None:
    text = (
        "7f0000000000 bind:0 huge anon=2 dirty=2 N0=2 kernelpagesize_kB=2048\n"
        "7f0000400000 default anon=3 N1=3 kernelpagesize_kB=4\n"
    )
    counts = _proc._numa_counts(text, [0x7F0000000000, 0x7F0000400000])
    assert counts == {0: 2 * (2048 * 1024 // PAGE), 1: 3}
    assert _proc._numa_counts(text, [0x7F0000000000, 0x7F0000800000]) is None  # one gone
