"""Place the buffers that carry GPU traffic: :func:`bind_memory` and :func:`memory_on`.

A process's memory policy decides where its *ordinary* allocations land.
The memory that carries host<->GPU copies is often something else: pinned
staging buffers, CPU KV-cache and weight-offload pools, the blocks of a
caching host allocator.  Whichever thread first touches those places them.
Two tools put them on the node that suits the GPU:

* :func:`bind_memory` (an existing buffer): applies ``mbind`` to the pages
  the buffer covers and, with ``move=True``, moves the pages that already
  exist; it returns a :class:`MemoryPlacement`, what the kernel reports
  afterwards.
* :func:`memory_on` (memory about to be allocated): a context manager that
  sets the calling thread's policy for the block and puts the previous one
  back afterwards, after an exception too.  This is how page-locked
  (pinned) memory is placed: it cannot be moved once pinned, and CUDA's
  pinned allocator touches its pages in the calling thread.

This module is their public front: the two tools, the result type and the
rules below.  Each rule names the private module whose code keeps it.

Rules
-----
**Which node.**  Exactly one of ``node=`` and ``gpu=``.  ``node`` is a node
id (or a node list, ``"0-1"`` or a set, for ``interleave``); it must exist,
have memory, and be among the process's allowed memory nodes (its
``cpuset.mems``), else :class:`~pynumabind.errors.PlanError` says which rule
it broke (:class:`~pynumabind.errors.UnknownIdError`, a PlanError, for a wrong
id: no such node, or a node without memory; the planner's ``interleave_nodes``
follows the same rule, written once in ``planner._request.check_memory_nodes``;
the arguments are resolved in :mod:`pynumabind.binding._target`).
``gpu=i`` (the process's GPU ordinal: ``torch.cuda.current_device()``,
``CUDA_VISIBLE_DEVICES`` applied) means *the memory a plan for a rank on GPU
i binds to*, decided by the planner's one owner of GPU locality
(:mod:`pynumabind.planner._place`) and its memory rules
(:mod:`pynumabind.planner._memory`), not re-derived here: the GPU's CPU
node, and that node's memory (a memory-less CPU node is replaced by the
nearest allowed node with memory).  On Grace (GH200/GB200) NVML names the
GPU's own HBM as a CPU-less NUMA node; host buffers still go to the Grace
CPU node's LPDDR next to it, as a plan's memory does, not into the HBM node
(pass ``node=`` to place a buffer there deliberately).  A GPU whose node is
unknown is a PlanError: there is nothing to place by.  The reasons are in
the result (``reasons``).

**Which policy.**  ``"bind"`` (``MPOL_BIND``: only these nodes, the kernel
reclaims or fails rather than spill), ``"preferred"`` (``MPOL_PREFERRED``,
``MPOL_PREFERRED_MANY`` for several nodes where the kernel has it: these
nodes first, spill over instead of failing), ``"interleave"``
(``MPOL_INTERLEAVE``, page by page over the nodes) or
``"weighted-interleave"`` (below).  ``local`` and ``none`` place nothing and
are a ConfigError here.  Which policies place a buffer, and the mode each
sets, is the policy table's (:mod:`pynumabind._mempolicy`).

**Weights.**  ``policy="weighted-interleave"`` spreads the pages over the
nodes in proportion to a weight per node.  ``weights={0: 3, 2: 1}`` (or
``"0:3,2:1"``; 1 to 255) names the nodes itself: give it alone, or with a
``node=`` naming the same nodes, never with ``gpu=``.  How the weights take
effect differs between the two tools, because the kernel's weights are
system-wide (``/sys/kernel/mm/mempolicy/weighted_interleave``; Linux has no
per-task ones):

* :func:`bind_memory` honours requested weights *exactly*, without the
  kernel's weights and on any kernel: the range is laid out in runs, each
  bound to one node with ``MPOL_BIND`` (:func:`pynumabind._weights.weighted_runs`:
  each node gets its exact share of the pages, within one page; runs of
  ``w`` points per node of weight ``w``, a point one page or more, at most
  256 runs, each a mapping of its own; where the range holds at least four
  cycles of huge-page runs the runs are whole transparent huge pages, so no
  huge page is split between nodes).  ``kernel_policy`` is ``MPOL_BIND``,
  ``runs`` counts the runs, and every page is judged against its own run's
  node.  Without weights it is the kernel's own ``MPOL_WEIGHTED_INTERLEAVE``
  by the kernel's weights (read, and judged against), and before Linux 6.9
  plain interleave, with a reason that says so.
* :func:`memory_on` sets a thread's policy, which follows the kernel's
  weights whatever is requested: requested weights that split pages
  otherwise are a reason and one :class:`RuntimeWarning`.

The split of the present pages over the nodes is judged against the weights
(the census's ``WEIGHTED`` judgement, as ``verify()``'s): each node's share
within 5 percentage points of its weight's share, or within one run of its
pages where a run is more; ``split_problems`` names each node off by more,
and ``in_proportion`` says whether none is.

**Which pages.**  ``mbind`` works on whole pages, so the range is aligned
*outward*: from the start of the page holding the buffer's first byte to the
end of the page holding its last.  Every byte of the buffer then lies on the
node (inward alignment would leave a buffer smaller than a page unplaced and
the partial first and last pages of, say, a ``malloc``-ed numpy array on
whatever node they were); the cost is that the at most two edge pages are
shared with whatever lies next to the buffer, and those neighbours' bytes
move and get the policy too.  ``mbind`` also splits the mapping at the range
ends (each call may add up to two entries to ``/proc/self/maps``; the limit
is ``vm.max_map_count``), and the policy stays on those addresses until they
are unmapped (a ``malloc`` heap reuses them).

**Huge pages.**  A transparent huge page is counted as its 4 KiB pages.
The kernel migrates a huge page whole: left alone, binding an 8 KiB range
inside a 2 MiB huge page would move the other 510 pages with it, and
binding its two halves to two nodes one after the other would leave both on
the second.  So, when moving, where pages outside the range share the
huge-page-aligned block of one of its edges (the size the kernel names in
``/sys/kernel/mm/transparent_hugepage/hpage_pmd_size``) and are present,
the policy is set first without moving (``mbind`` splits the mapping at the
range's ends, so ``khugepaged`` cannot make a huge page across them again:
seen on Linux 6.18 when the split came first), then each such edge's huge
page is split with ``madvise(MADV_COLD)`` on the edge page (it splits a
huge page it covers in part; the one page is also marked cold, a reclaim
hint), then the pages are moved.  Neighbours stay where they are.  Where the
split cannot be done (an ``mlock``-ed huge page: ``MADV_COLD`` refuses
locked memory; one shared with another process; Linux before 5.4) the
kernel moves the huge page whole, and the result says how many pages
outside the range moved (``moved_outside``, from the neighbours' nodes
before and after, by ``move_pages``; a note says why).  ``complete`` is
about the range only.  Tested on a real kernel in the QEMU guest (Linux
6.1): the 8 KiB range, the two halves, and an ``mlock``-ed huge page that
moves whole and is counted; with automatic NUMA balancing on too (see "Where
the pages are").  ``hugetlbfs`` mappings need huge-page-aligned
ranges and are not supported.  (The edges: :mod:`pynumabind.binding._census`.)

**Moving.**  ``move=True`` passes ``MPOL_MF_MOVE``: pages mapped only by this
process and not already on one of the policy's nodes move (so interleaving
pages over nodes they already lie on does not re-spread them).
``MPOL_MF_MOVE_ALL`` (pages shared with other processes too) needs
``CAP_SYS_NICE`` and is not used; such pages stay and are reported with
``EACCES``.  Pages not yet touched (``-ENOENT``) are no failure: they
will be allocated under the policy when first touched, and are counted as
``not_present``.  Afterwards each page is asked where it is, and a page
still off the nodes is asked to move once more, explicitly; each page left
there is counted with the reason: a per-page errno (``EBUSY``: busy or
locked in place; ``EACCES``: shared; ``ENOMEM``: the node is full, also when
the kernel refuses the whole call once the node is full after moving what
fitted: the counts are kept and a note says "node N is full"; ...),
:data:`NOT_MIGRATED` for pages the kernel tried and failed to migrate,
which it reports only as a count (an extra reference holds them: memory
pinned by ``cudaHostAlloc``/``cudaHostRegister``, RDMA or io_uring), or
:data:`VANISHED` for a page present before the move and not found after it,
though asked again (it was written, so it is never "not present").  A page
caught mid-migration, or in a huge page being split, reads as not present
for a moment, so such a page is asked for again before it counts as not
present.  (How: :mod:`pynumabind.binding._census`.)

**Where the pages are.**  ``move_pages`` with no target reports each page's
node, and under automatic NUMA balancing (on by default on multi-node
machines) Linux 6.1 to 6.4 report a written page the balancer has marked
for a hinting fault as *not present*.  Touching the page would fault it and
let the balancer migrate it, so the census asks the page table instead
(``/proc/self/pagemap``, which faults nothing in): a page it shows present
is counted on its node when its frame can be read (``CAP_SYS_ADMIN``), else
by ``/proc/self/numa_maps`` when the range is a run of whole mappings (after
``mbind`` it is, unless it merged with a neighbour bound the same way; the
runs of a weighted layout are whole mappings too, and such pages count in
the split by their node, their run unknown), else as ``not_located``:
present, node unknown.  The neighbours of the huge-page
edges are found the same way, so a marked huge page is split too.  Where
the truth cannot be had the result says so: ``not_located`` counts the
pages, ``complete`` is False, and a note says why; never "not present" for
a page that is there.  (How: :mod:`pynumabind._os.pages`.)

**Page-locked (pinned) memory cannot be moved**; the result says so and
points to :func:`memory_on`.  ``mlock`` alone does not prevent migration
(Linux migrates locked pages); pinning for DMA does.  Both are tested on a
real kernel in the QEMU guest (Linux 6.1): ``mlock``-ed pages move, pages
pinned by io_uring's buffer registration (the same long-term pin
``cudaHostRegister`` takes) stay and are reported as :data:`NOT_MIGRATED`.  ``move=False`` only
sets the policy for pages not yet allocated; pages elsewhere are reported
under :data:`NOT_ASKED`.

**Buffers.**  Anything that exports a writable buffer whose bytes are one
range (``bytearray``, ``mmap``, ``memoryview``, a numpy array,
``array.array``), in any layout: C or Fortran order, negative strides (a
reversed view starts its memory at its last element); the span is worked
out from the shape and strides, and its address read through CPython's
buffer API when the layout is not C order.  A strided view with gaps
between its elements is refused.  A CPU tensor, duck-typed by
``data_ptr()``, ``numel()`` and ``element_size()``: its span from
``size()``/``stride()`` when it has them, negative strides included (every
byte from its lowest to its highest element, gaps and all); torch is never
imported here.  Or an explicit ``(address, length)`` tuple, which the caller
must keep mapped.  A span must end, page-aligned, below ``2**64`` (``mbind``'s
end would wrap).  A buffer object is held exported for the whole call, so a
``bytearray`` cannot be resized under it.  (How: :mod:`pynumabind.binding._buffers`.)

**Errors.**  Not a buffer, one with gaps, a GPU tensor, or a tensor-like
object whose ``numel()``/``size()``/``stride()``/``element_size()`` are not
integers or do not agree: :class:`NotABufferError`.  A read-only buffer
(``bytes``, a read-only ``mmap``): :class:`ReadOnlyBufferError` (its pages
are often shared, a file's page cache, and are no staging buffer).  Both
``node`` and ``gpu``, neither, a bad policy name, a zero length, a span that
is no memory range (a negative address; a huge ``numel`` or an address that
reaches ``2**64``): :class:`~pynumabind.errors.ConfigError` naming the span.
A node that does not exist, has no memory or is outside the allowed memory
nodes, or an unknown GPU: :class:`~pynumabind.errors.PlanError` (the wrong
ids among them: its subclass :class:`~pynumabind.errors.UnknownIdError`).  The kernel
refusing (``EPERM`` under a container's seccomp profile, ``EFAULT`` for an
address range with an unmapped hole, ``EINVAL``): :class:`PlacementSyscallError`
(a :class:`~pynumabind.errors.NumaSyscallError`) naming the call, the range,
the errno and what to do.  When only the read-back (``move_pages``) is
denied, the policy was applied and the result says the page counts are
unknown instead of raising.

**What memory_on guarantees.**  A memory policy belongs to a thread, not
to a block of code; :func:`memory_on` keeps each thread's blocks in force
(innermost last) and puts back, when the last of them ends, the policy from
before the first.  Its undo is recorded before ``set_mempolicy`` is called,
as a bind's journal is.  (How: :mod:`pynumabind.binding._memory_on`.)

* *Nesting, exceptions*: the policy from before each block comes back when
  it ends, after an exception too.
* *Coroutines and generators*: while a block is suspended at an ``await``
  or ``yield``, its policy is still the thread's, so whatever the thread
  runs meanwhile (other asyncio tasks, the generator's caller) allocates
  under it.  Keep the block synchronous: allocate inside it, and leave it
  before awaiting.  Blocks may still end out of order (two tasks each in a
  block, the first leaving first; a suspended generator closed inside its
  caller's block): the one leaving hands what it would have put back to the
  block entered after it, the thread keeps the innermost block's policy
  until that ends, and then the policy from before both comes back; one
  :class:`RuntimeWarning` says so.  A generator closed, finished or freed
  on its own thread ends its block.
* *KeyboardInterrupt* (or any exception) landing anywhere in ``__enter__``
  or ``__exit__``, after ``set_mempolicy`` or before the restore, rolls the
  block back.  One landing on the very first instruction of ``__exit__``,
  before any of it runs, cannot be caught there; the block then ends when
  its object is freed, which for ``with memory_on(...):`` is when the
  interrupt's traceback is (a finalizer, armed only while a block is in
  force).  Tested at every interpreter check point of a block, and with
  real SIGINTs at random moments (``tests/binding/test_placement.py``).
* *fork*: a child forked inside a block has one thread, the forking
  thread's copy, with its policy and its blocks; leaving the block there
  puts the previous policy back, in the child as in the parent.
* *A cpuset change*: when the cpuset's ``mems`` change during a block so
  that none of the saved policy's nodes is allowed any more, the kernel
  refuses it (``EINVAL``).  The nearest policy it accepts is put back: the
  same mode and flags over the allowed part of the saved nodes, else over
  the nodes the kernel's own remapping gives them (what the saved policy
  would have become had it been in force: the i-th allowed node before
  becomes the i-th, modulo their count, after), else the default policy;
  one :class:`RuntimeWarning` names the policy refused, the allowed nodes
  before and now, and what was put back.  The block's policy is never left
  in place (unless the kernel refuses even the default: a seccomp filter
  installed inside the block, a :class:`PlacementSyscallError`).  Where only
  some saved nodes are gone, the kernel itself keeps the allowed part.
* *Another thread*: a block left on a thread other than the one that
  entered it is a ConfigError naming both; a policy can only be put back by
  its own thread.

Nothing here changes another thread, and :func:`bind_memory` changes no
thread state at all; :func:`memory_on` changes only the calling thread's
policy, for the block.  Threads started inside the block inherit the policy
and keep it.
"""

from __future__ import annotations

import mmap
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterable, Mapping, Optional, Tuple, Union

from .._os import libnuma as _libnuma
from .._text import format_ids
from .._weights import format_weights, weighted_runs
from ..errors import (
    ConfigError,
    NotABufferError,
    NumaSyscallError,
    PlacementSyscallError,
    ReadOnlyBufferError,
)
from ..model import MemoryPolicy
from ._buffers import Span, open_buffer, outward
from ._census import (
    NOT_ASKED,
    NOT_MIGRATED,
    NOT_PRESENT,
    PINNED_REASONS,
    REASONS,
    VANISHED,
    Segment,
    count_pages,
    cut_huge_pages,
    neighbours_before,
    page_count,
    reread,
    split_at,
    split_edges,
)
from ._memory_on import MemoryOn
from ._target import Target, refused, resolve

if TYPE_CHECKING:  # pragma: no cover
    from ..model import Topology

__all__ = [
    "NOT_ASKED",
    "NOT_MIGRATED",
    "NOT_PRESENT",
    "VANISHED",
    "MemoryOn",
    "MemoryPlacement",
    "NotABufferError",
    "PlacementSyscallError",
    "ReadOnlyBufferError",
    "bind_memory",
    "memory_on",
]


# ------------------------------------------------------------------ result


@dataclass(frozen=True)
class MemoryPlacement:
    """Where a buffer's pages are after :func:`bind_memory`, as the kernel reports it.

    ``address``/``size`` are the buffer as given; ``start``/``length`` the
    page-aligned range that was bound (aligned outward), ``pages`` its page
    count.  ``pages_per_node`` counts the pages present on each node
    (``move_pages`` queried after the bind); ``not_present`` the pages not
    yet allocated (or backed by the shared zero page), which will follow the
    policy when first written.  ``not_moved`` maps a reason (an errno name,
    :data:`NOT_MIGRATED`, :data:`NOT_ASKED` or :data:`VANISHED`; :data:`REASONS`
    explains each) to the number of present pages left off ``nodes`` for it.
    ``pages_per_node`` is ``None`` when the kernel would not say (a seccomp
    profile denying ``move_pages``); ``notes`` then say so.  ``moved_outside``
    counts the pages outside the range that moved with it because they shared
    a transparent huge page the kernel could not split (see "Huge pages").

    Weighted interleave (see "Weights"): ``weights`` are what the split is
    judged against (the requested ones, or the kernel's), ``runs`` how many
    runs of one node each the range was bound in (1: one ``mbind`` for all of
    it), and ``split_problems`` each node whose share of the present pages is
    off its weight's share beyond the tolerance.

    ``not_located`` counts present pages whose node could not be read (see
    "Where the pages are"): neither in ``pages_per_node`` nor ``not_present``.
    """

    address: int
    size: int
    start: int
    length: int
    pages: int
    nodes: frozenset[int]
    policy: str
    kernel_policy: str
    move: bool
    pages_per_node: Optional[Mapping[int, int]] = field(hash=False)
    not_present: int = 0
    not_moved: Mapping[str, int] = field(default_factory=dict, hash=False)
    reasons: Tuple[str, ...] = ()
    notes: Tuple[str, ...] = ()
    moved_outside: int = 0
    not_located: int = 0
    weights: Optional[Mapping[int, int]] = field(default=None, hash=False)
    runs: int = 1
    split_problems: Tuple[str, ...] = ()

    @property
    def in_proportion(self) -> Optional[bool]:
        """Under weights: whether the present pages' split is theirs (None: nothing to judge)."""
        if self.weights is None or self.pages_per_node is None:
            return None
        return not self.split_problems

    @property
    def on_nodes(self) -> Optional[int]:
        """Present pages on the target nodes (None when unknown)."""
        if self.pages_per_node is None:
            return None
        return sum(c for n, c in self.pages_per_node.items() if n in self.nodes)

    @property
    def complete(self) -> bool:
        """Every present page is on the target nodes, as the kernel reports it.

        False when some page's node is unknown (``not_located``).
        """
        return self.pages_per_node is not None and not self.not_moved and not self.not_located

    @property
    def pinned(self) -> bool:
        """Some pages stayed for a reason that means page-locked (pinned) memory."""
        return any(reason in PINNED_REASONS for reason in self.not_moved)

    def summary(self) -> str:
        where = f"{self.kernel_policy} on node {format_ids(self.nodes)}"
        if self.runs > 1:
            where = f"{self.kernel_policy} in {self.runs} runs over nodes {format_ids(self.nodes)}"
        if self.weights is not None:
            where += f" by weights {format_weights(self.weights)}"
        head = f"{self.size} bytes at {self.address:#x} ({page_count(self.pages)}): {where}"
        if self.pages_per_node is None:
            return f"{head}; page locations unknown"
        counts = ", ".join(f"{c} on node {n}" for n, c in sorted(self.pages_per_node.items()))
        parts = [head, f"pages present: {counts or 'none'}"]
        if self.not_present:
            parts.append(f"{self.not_present} not present yet")
        if self.not_located:
            parts.append(f"{self.not_located} present, node unknown")
        for reason, count in sorted(self.not_moved.items()):
            parts.append(f"{count} not moved ({reason}: {REASONS.get(reason, reason)})")
        if self.moved_outside:
            parts.append(f"{page_count(self.moved_outside)} outside the range moved with it")
        parts.extend(self.split_problems)
        return "; ".join(parts)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "address": self.address,
            "size": self.size,
            "start": self.start,
            "length": self.length,
            "pages": self.pages,
            "nodes": sorted(self.nodes),
            "policy": self.policy,
            "kernel_policy": self.kernel_policy,
            "move": self.move,
            "pages_per_node": None
            if self.pages_per_node is None
            else {str(n): c for n, c in sorted(self.pages_per_node.items())},
            "not_present": self.not_present,
            "not_moved": dict(sorted(self.not_moved.items())),
            "complete": self.complete,
            "reasons": list(self.reasons),
            "notes": list(self.notes),
            "moved_outside": self.moved_outside,
            "not_located": self.not_located,
            "weights": None
            if self.weights is None
            else {str(n): w for n, w in sorted(self.weights.items())},
            "runs": self.runs,
            "split_problems": list(self.split_problems),
            "in_proportion": self.in_proportion,
        }


def _segments(start: int, length: int, target: Target) -> Tuple[Segment, ...]:
    """The parts of the range and their nodes: its runs under exact weights, else all of it."""
    if not target.exact or target.weights is None:
        return ((start, length, target.nodes),)
    layout = weighted_runs(
        start, length, target.weights, page=mmap.PAGESIZE, huge=_libnuma.huge_page_size()
    )
    return tuple((r.start, r.length, frozenset({r.node})) for r in layout.runs)


def _run_pages(segments: Tuple[Segment, ...], target: Target) -> Dict[int, int]:
    """The pages of one run of each node: the tolerance's slack for the split.

    Pynumabind's runs: the longest of each node's.  The kernel's own weighted
    interleave: ``w`` pages a node, or ``w`` huge pages where the range holds
    a whole one (transparent huge pages are interleaved whole).
    """
    weights = target.weights or {}
    if target.exact:
        longest: Dict[int, int] = {}
        for _, seg_length, nodes in segments:
            node = next(iter(nodes))
            longest[node] = max(longest.get(node, 0), seg_length // mmap.PAGESIZE)
        return longest
    huge, page = _libnuma.huge_page_size(), mmap.PAGESIZE
    _, length, _ = segments[0]
    unit = huge // page if huge > page and length >= 2 * huge else 1
    return {n: w * unit for n, w in weights.items()}


def _report(
    span: Span,
    segments: Tuple[Segment, ...],
    target: Target,
    move: bool,
    *,
    neighbours: Mapping[int, int],
) -> MemoryPlacement:
    """The result: the range and target, and the census of its pages (``_census.count_pages``)."""
    start = segments[0][0]
    length = segments[-1][0] + segments[-1][1] - start
    counted = count_pages(
        segments,
        move,
        neighbours,
        weights=target.weights,
        run_pages=None if target.weights is None else _run_pages(segments, target),
    )
    return MemoryPlacement(
        address=span.address,
        size=span.length,
        start=start,
        length=length,
        pages=length // mmap.PAGESIZE,
        nodes=target.nodes,
        policy=target.policy.value,
        kernel_policy=_libnuma.MODE_NAMES.get(target.mode, str(target.mode)),
        move=move,
        pages_per_node=counted.per_node,
        not_present=counted.not_present,
        not_moved=counted.not_moved,
        reasons=target.reasons,
        notes=counted.notes,
        moved_outside=counted.moved_outside,
        not_located=counted.not_located,
        weights=target.weights,
        runs=len(segments),
        split_problems=counted.split_problems,
    )


# --------------------------------------------------------------- bind_memory


def bind_memory(
    buffer: object,
    *,
    node: Union[int, str, Iterable[int], None] = None,
    gpu: Optional[int] = None,
    policy: Union[str, MemoryPolicy] = "bind",
    move: bool = True,
    topology: Optional[Topology] = None,
    weights: Union[str, Mapping[int, int], None] = None,
) -> MemoryPlacement:
    """Put ``buffer``'s pages on ``node`` (or GPU ``gpu``'s memory node); report where they are.

    ``buffer``: an object with a writable buffer (bytearray, mmap, numpy
    array, array.array, memoryview), a CPU tensor (duck-typed by
    ``data_ptr()``/``numel()``/``element_size()``) or ``(address, length)``.
    The pages it covers, aligned outward, get ``policy`` (``"bind"``,
    ``"preferred"``, ``"interleave"``, ``"weighted-interleave"``) with
    ``mbind``; with ``move=True`` the pages that exist already are moved
    (``MPOL_MF_MOVE``).  ``weights={0: 3, 2: 1}`` with
    ``policy="weighted-interleave"`` (the weights name the nodes) are
    honoured exactly, in runs of pages bound to one node each, whatever the
    kernel's system-wide weights (see "Weights" in the module docstring):
    ``bind_memory(buf, policy="weighted-interleave", weights={0: 3, 2: 1})``
    leaves three quarters of its pages on node 0.  Returns a
    :class:`MemoryPlacement`: pages per node as ``move_pages`` reports them
    afterwards, and each page not moved with its reason.  Page-locked
    (pinned) memory cannot be moved: allocate it inside :func:`memory_on`.
    ``topology`` is what ``node``/``gpu`` are checked and resolved against;
    by default the machine a plan would use
    (:func:`~pynumabind.discovery.resolve_topology`: this process on
    ``PYNUMABIND_TOPOLOGY``'s snapshot when set, else this machine).  See
    the module docstring for every rule and error.

    Args:
        buffer: The memory to place: a writable buffer, a CPU tensor or
            ``(address, length)``.
        node: The node (or, for the interleave policies, the nodes) to place
            it on.
        gpu: Instead of ``node``: the GPU index whose memory node it goes to.
        policy: ``"bind"``, ``"preferred"``, ``"interleave"`` or
            ``"weighted-interleave"``.
        move: Also move the pages that exist already.
        topology: The machine ``node`` and ``gpu`` are checked against.
        weights: For ``"weighted-interleave"``: node -> weight (1 to 255),
            honoured exactly; the nodes are theirs.

    Returns:
        A :class:`MemoryPlacement`: the nodes and policy applied, the pages
        per node, and each page not moved with its reason; under weights,
        the runs and whether the split is in proportion.

    Raises:
        NotABufferError: ``buffer`` has no memory to address (not a buffer,
            not contiguous, a GPU tensor).
        ReadOnlyBufferError: ``buffer`` is read-only.
        ConfigError: both or neither of ``node`` and ``gpu`` (or weights
            with ``gpu``, or with a ``node`` naming other nodes, or with
            another policy), a bad policy or weight, a zero length, ``move``
            not a bool.
        PlanError: a node that does not exist, has no memory or is not
            allowed, or a GPU that is unknown or on an unknown node
            (:class:`~pynumabind.errors.UnknownIdError` for a wrong id).
        PlacementSyscallError: the kernel refused (``EPERM`` under seccomp,
            ``EFAULT``, ``EINVAL``); the message names the call and the fix.
    """
    if not isinstance(move, bool):
        raise ConfigError(f"move must be True or False, not {move!r}")
    span, exported = open_buffer(buffer)
    try:
        target = resolve(node, gpu, policy, topology, weights, exact=True)
        start, length = outward(span)
        segments = _segments(start, length, target)
        neighbours = neighbours_before(start, length) if move else {}
        cuts = cut_huge_pages(segments) if move else []
        if neighbours or cuts:
            # Huge pages: see "Which pages".  The policy first, without moving: the
            # mapping is split at the range's ends (and its runs'), so no huge page can
            # form across them again; then the huge pages those ends cut are split;
            # then the neighbours are asked where they are once more (nothing has
            # moved yet, and a huge page the balancer marked reads again once split);
            # then the move.
            _mbind(segments, target.mode, 0)
            split_edges(start, length, neighbours)
            split_at(cuts)
            neighbours = reread(neighbours)
        _mbind(segments, target.mode, _libnuma.MPOL_MF_MOVE if move else 0)
        return _report(span, segments, target, move, neighbours=neighbours)
    finally:
        if exported is not None:
            exported.close()


def _mbind(segments: Tuple[Segment, ...], mode: int, flags: int) -> None:
    """``mbind`` each segment to its nodes; a refusal names the segment."""
    name = _libnuma.MODE_NAMES.get(mode, str(mode))
    for start, length, nodes in segments:
        try:
            _libnuma.mbind_range(start, length, mode, nodes, flags)
        except NumaSyscallError as exc:
            operation = f"mbind({name}) of {length} bytes at {start:#x}"
            raise refused(exc, operation, nodes) from None


# ---------------------------------------------------------------- memory_on


def memory_on(
    *,
    node: Union[int, str, Iterable[int], None] = None,
    gpu: Optional[int] = None,
    policy: Union[str, MemoryPolicy] = "bind",
    topology: Optional[Topology] = None,
    weights: Union[str, Mapping[int, int], None] = None,
) -> MemoryOn:
    """Allocate on ``node`` (or GPU ``gpu``'s memory node) inside a ``with`` block.

    The calling thread's memory policy is ``policy`` on those nodes inside
    the block; the previous one (mode, nodes and flags, as
    ``get_mempolicy`` reads them) is put back when the block ends, after an
    exception too.  Only pages first touched inside the block by this thread
    (or by threads it starts there, which keep the policy) follow it; memory
    an allocator already holds does not move.  The arguments are checked
    now; the policy changes on entry.

    The policy is the thread's, not the block's: do not ``await`` or
    ``yield`` inside the block (whatever the thread runs while it is
    suspended allocates under it).  Blocks that end out of order, an
    interrupt at any point, a ``fork`` inside the block and a cpuset change
    during it all end with the policy from before the block, or the nearest
    one the kernel accepts (see "What memory_on guarantees" in the module
    docstring).

    Pinned memory cannot be moved after the fact, so this is how it is
    placed: CUDA's pinned allocator touches its pages in the calling thread::

        with pynumabind.memory_on(gpu=torch.cuda.current_device()):
            staging = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)

    A vLLM/LMCache-style offload pool: allocate it once, inside the block,
    from the process that drives the GPU, and keep it (a caching host
    allocator reuses freed blocks wherever they were allocated)::

        with pynumabind.memory_on(gpu=local_gpu):
            pool = torch.empty((num_blocks, block_bytes), dtype=torch.uint8,
                               pin_memory=True)

    For memory pinned by registration (``cudaHostRegister``) the order is
    the same idea: :func:`bind_memory` the buffer first, register it after.

    ``policy="weighted-interleave"`` is a thread's policy: it follows the
    kernel's system-wide weights.  ``weights=`` names the nodes; where the
    kernel's weights split pages otherwise, the block's ``reasons`` say so
    and one :class:`RuntimeWarning` is issued (:func:`bind_memory` places a
    buffer by requested weights exactly).

    Args:
        node: The node (or, for the interleave policies, the nodes) to
            allocate on.
        gpu: Instead of ``node``: the GPU index whose memory node to allocate
            on.
        policy: ``"bind"``, ``"preferred"``, ``"interleave"`` or
            ``"weighted-interleave"``.
        topology: The machine ``node`` and ``gpu`` are checked against.
        weights: For ``"weighted-interleave"``: node -> weight, compared
            with the kernel's (which the thread follows); the nodes are theirs.

    Returns:
        The context manager; entering it sets the policy, leaving it puts
        the previous one back.

    Raises:
        ConfigError: both or neither of ``node`` and ``gpu``, or a bad
            policy (checked here, before the block); the same object
            entered twice.
        PlanError: as for :func:`bind_memory`: a node or GPU that cannot be
            placed on.
        PlacementSyscallError: on entering or leaving the block, the kernel
            refused ``set_mempolicy`` or ``get_mempolicy``.
    """
    target = resolve(node, gpu, policy, topology, weights)
    if target.mismatch is not None:
        warnings.warn(f"memory_on: {target.mismatch}", RuntimeWarning, stacklevel=2)
    return MemoryOn(target)
