"""Where a page is when ``move_pages`` says it is not there: the page table's own answer.

Every placement check here asks ``move_pages`` (with no target nodes: it
reports, it moves nothing) where each page is.  That call looks a page up
the way ``get_user_pages`` does, and on some kernels the lookup refuses a
page that automatic NUMA balancing has marked for a hinting fault: the
balancer's scanner maps the process's pages ``PROT_NONE`` (every
``numa_balancing_scan_period`` of CPU time the process runs), and the next
touch faults, and may migrate the page.  Linux 6.1's ``follow_page`` skips
such an entry (``pte_protnone``/``pmd_protnone`` unless ``FOLL_FORCE``: the
commit "mm/gup: replace FOLL_NUMA by gup_can_follow_protnone()",
474098edac26), so ``move_pages`` reports a present, written page as not
present: ``-ENOENT`` (a small page) or ``-EFAULT`` (a transparent huge page:
``FOLL_DUMP`` in an anonymous mapping).  The fix, "mm/gup: reintroduce
FOLL_NUMA as FOLL_HONOR_NUMA_FAULT" (August 2023), is not in the 6.1 stable
series (6.1.192's ``mm/gup.c`` still has the old test); 6.12 looks pages up
with ``folio_walk`` and reports their node (measured in the QEMU guests, see
``tests/vm/README.md``).  A page of a ``PROT_NONE`` mapping reads the same way.

Touching the page would resolve the hint, but a touch is a fault, and the
fault lets the balancer migrate the page: it changes what is measured.
:func:`locate` asks instead what nothing faults in:

* ``/proc/self/pagemap`` (:func:`pynumabind._os.proc.pagemap`): whether the
  page is present (a marked page is: ``pte_present`` counts
  ``_PAGE_PROTNONE`` on x86), whether this process alone maps it, and, to
  ``CAP_SYS_ADMIN`` only, its frame number;
* the frame's node: the memory block holding the frame
  (``/sys/devices/system/memory/block_size_bytes``, and the ``memory<N>``
  links of each ``/sys/devices/system/node/node<N>``);
* whether the frame is the shared zero page or no ordinary page at all
  (``/proc/kpageflags``: ``KPF_ZERO_PAGE``, ``KPF_NOPAGE``; root only),
  which ``move_pages`` rightly reports as not present.

Each page ``move_pages`` reported as not there then is one of:

* not present (pagemap says so): the status stays as ``move_pages`` gave it;
* present, with a frame: its node, unless the frame is the zero page or no
  ordinary page (the status stays);
* present, without a frame (no ``CAP_SYS_ADMIN``): :data:`UNLOCATED`, an
  ordinary page whose node is unknown, when this process alone maps it
  (pagemap's "exclusively mapped" bit) or ``move_pages`` said ``-ENOENT``
  (the shared zero page reads ``-EFAULT``); the status stays for the huge
  zero page (pagemap's "file page" bit, with ``-EFAULT``); else
  :data:`UNSURE`: the shared zero page, or a page this process shares with
  another (copy-on-write after ``fork``) that the balancer marked, which an
  unprivileged process cannot tell apart.

A caller that wants counts for a whole range settles :data:`UNLOCATED` and
:data:`UNSURE` pages with ``/proc/self/numa_maps``
(:func:`pynumabind._os.proc.mapping_node_pages`), which counts marked pages
on their node and the zero page nowhere, when the range is a run of whole
mappings.  When pagemap cannot be read at all, the statuses stay as
``move_pages`` gave them and :attr:`Located.unchecked` counts the pages it
reported as not there: :func:`balancing` says whether that can hide anything.
"""

from __future__ import annotations

import errno
import mmap
import os
from array import array
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import PynumabindError
from . import PROC_ROOT, SYSFS_ROOT
from . import proc as _proc
from .textfile import numbered, read_ascii

__all__ = [
    "BALANCING",
    "KPAGEFLAGS",
    "MEMORY_BLOCKS",
    "UNLOCATED",
    "UNSURE",
    "Located",
    "balancing",
    "frame_nodes",
    "locate",
    "not_there",
    "unknown",
]

#: An ordinary page, present (the page table maps it), whose node could not be read.
#: Outside every ``-errno``, so it never reads as a ``move_pages`` error.
UNLOCATED = -(1 << 20)
#: Present in the page table, node unknown, and maybe the shared zero page (not a page of
#: this process's own): what an unprivileged process sees of a page it shares with another.
UNSURE = -(1 << 20) - 1

BALANCING = f"{PROC_ROOT}/sys/kernel/numa_balancing"
KPAGEFLAGS = f"{PROC_ROOT}/kpageflags"
MEMORY_BLOCKS = f"{SYSFS_ROOT}/devices/system/memory"
NODES = f"{SYSFS_ROOT}/devices/system/node"

_PRESENT = 1 << 63
_FILE = 1 << 61
_EXCLUSIVE = 1 << 56
_FRAME = (1 << 55) - 1
_KPF_NOPAGE = 1 << 20
_KPF_ZERO_PAGE = 1 << 24


@dataclass(frozen=True)
class Located:
    """:func:`locate`'s answer.

    ``status``: per address, a node (``>= 0``), :data:`UNLOCATED`,
    :data:`UNSURE`, or the ``-errno`` ``move_pages`` gave for a page that is
    not there.
    ``unchecked``: how many of those negative statuses pagemap could not
    check (it could not be read: ``why`` says what failed).
    """

    status: Tuple[int, ...]
    unchecked: int = 0
    why: str = ""


def balancing() -> Optional[bool]:
    """Whether automatic NUMA balancing is on (``/proc/sys/kernel/numa_balancing``); None: unknown.

    Any non-zero mode counts (1: balancing; 2: memory tiering; 3: both).
    """
    try:
        text = read_ascii(BALANCING, "the NUMA balancing switch").strip()
    except (OSError, PynumabindError):
        return None
    return text != "0" if text.isascii() and text.isdigit() else None


def frame_nodes() -> Tuple[int, Dict[int, int]]:
    """(bytes per memory block, memory block -> node) from sysfs; ``(0, {})`` when unknown.

    A block linked from two nodes is left out: its frames' node is unknown.
    """
    try:
        size = int(read_ascii(f"{MEMORY_BLOCKS}/block_size_bytes", "memory block size"), 16)
        owners: Dict[int, List[int]] = {}
        for node in numbered(os.listdir(NODES), "node"):
            for block in numbered(os.listdir(f"{NODES}/node{node}"), "memory"):
                owners.setdefault(block, []).append(node)
    except (OSError, ValueError, PynumabindError):
        return 0, {}
    return size, {block: nodes[0] for block, nodes in owners.items() if len(nodes) == 1}


def _page_flags(frames: Sequence[int]) -> Optional[Dict[int, int]]:
    """``/proc/kpageflags`` of each frame; None when it cannot be read (not root).

    Runs of consecutive frames (a huge page's) are read with one ``pread`` each.
    """
    flags: Dict[int, int] = {}
    try:
        fd = os.open(KPAGEFLAGS, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        for first, count in _proc.runs(sorted(set(frames))):
            data = os.pread(fd, 8 * count, 8 * first)
            if len(data) != 8 * count:
                return None
            words = array("Q")
            words.frombytes(data)
            flags.update(zip(range(first, first + count), words))
    except OSError:
        return None
    finally:
        os.close(fd)
    return flags


@dataclass(frozen=True)
class _Frames:
    """What the frames of the present pages say: their nodes, and their flags when readable."""

    block_size: int = 0
    blocks: Mapping[int, int] = field(default_factory=dict)
    flags: Optional[Mapping[int, int]] = None

    @classmethod
    def read(cls, frames: Sequence[int]) -> _Frames:
        if not any(frames):
            return cls()
        size, blocks = frame_nodes()
        return cls(size, blocks, _page_flags(frames))

    def node(self, frame: int) -> Optional[int]:
        if not self.block_size:
            return None
        return self.blocks.get(frame * mmap.PAGESIZE // self.block_size)

    def ordinary(self, frame: int, exclusive: bool) -> bool:
        """Whether the frame is an ordinary page (not the zero page; a page with a struct)."""
        kind = None if self.flags is None else self.flags.get(frame)
        if kind is None:
            return exclusive  # kpageflags cannot say: only a page mapped once is surely one
        return not kind & (_KPF_ZERO_PAGE | _KPF_NOPAGE)


def locate(addresses: Sequence[int], status: Sequence[int]) -> Located:
    """``status`` (``move_pages``' answers for ``addresses``) with the pages it missed looked up.

    Only the negative statuses are looked up (see the module docstring for
    what each becomes); nothing is faulted in.  Never raises: what could not
    be read leaves the status as it was (``unchecked`` counts those when
    pagemap itself could not be read).
    """
    found = list(status)
    missed = [i for i, where in enumerate(found) if where < 0]
    if not missed:
        return Located(tuple(found))
    try:
        entries = _proc.pagemap([addresses[i] for i in missed])
    except PynumabindError as exc:
        return Located(tuple(found), unchecked=len(missed), why=str(exc))
    frames = _Frames.read([entry & _FRAME for entry in entries if entry & _PRESENT])
    for i, entry in zip(missed, entries):
        found[i] = _resolved(found[i], entry, frames)
    return Located(tuple(found))


def _resolved(was: int, entry: int, frames: _Frames) -> int:
    """One missed page's status, from its pagemap entry (see the module docstring)."""
    if not entry & _PRESENT:
        return was  # not present: move_pages was right
    exclusive = bool(entry & _EXCLUSIVE)
    frame = entry & _FRAME
    if not frame:  # no frame number shown: not CAP_SYS_ADMIN
        if exclusive or was == -errno.ENOENT:
            return UNLOCATED  # this process's own page, or one the zero page cannot be
        return was if entry & _FILE else UNSURE  # the huge zero page reads as a file page
    if not frames.ordinary(frame, exclusive):
        return was  # the zero page, or no ordinary page: move_pages was right
    node = frames.node(frame)
    return UNLOCATED if node is None else node


def not_there(status: int) -> bool:
    """Whether a located status is a page that is not there (never written, or not ordinary)."""
    return status < 0 and status not in (UNLOCATED, UNSURE)


def unknown(status: int) -> bool:
    """Whether a located status is a present page whose node is unknown (or maybe the zero page)."""
    return status in (UNLOCATED, UNSURE)
